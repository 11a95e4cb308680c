"""Wait on several events at once with OrEvent and AndEvent.

Three worker threads finish at different times, each setting its own event.
The main thread waits for the first one to finish (OrEvent), then for all of
them (AndEvent), and finally for a nested condition.
"""

import threading
import time

from machin.parallel.event import AndEvent, OrEvent


def worker(name: str, delay: float, done: threading.Event) -> None:
    time.sleep(delay)
    print(f"  {name} finished after {delay:.1f} s")
    done.set()


def main() -> None:
    delays = {"fast": 0.2, "medium": 0.5, "slow": 0.8}
    events = {name: threading.Event() for name in delays}
    first_done = OrEvent(*events.values())
    all_done = AndEvent(*events.values())
    # Nesting: "fast and medium" or "slow".
    nested = OrEvent(AndEvent(events["fast"], events["medium"]), events["slow"])

    threads = [
        threading.Thread(target=worker, args=(name, delay, events[name]))
        for name, delay in delays.items()
    ]
    for thread in threads:
        thread.start()

    print("waiting for any worker...")
    print("OrEvent set:", first_done.wait(timeout=5))
    print("AndEvent set yet?", all_done.is_set())
    print("waiting for fast and medium, or slow...")
    print("nested event set:", nested.wait(timeout=5))
    print("waiting for every worker...")
    print("AndEvent set:", all_done.wait(timeout=5))
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
