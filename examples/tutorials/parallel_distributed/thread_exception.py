"""Catch an exception raised in a sub-thread.

A plain threading.Thread prints its exception and forgets it; the main thread
never knows. machin.parallel.thread.Thread keeps it: ``exception`` tells whether
the thread failed, and ``watch()`` raises the failure in the main thread with the
original traceback text. A cleaner runs after the target even when it fails.
"""

from machin.parallel.thread import Thread, ThreadException


def parse_setting(text: str) -> int:
    return int(text)  # fails for "ten"


def main() -> None:
    thread = Thread(
        target=parse_setting,
        args=("ten",),
        cleaner=lambda: print("cleaner: releasing resources of the sub-thread"),
    )
    thread.start()
    thread.join()

    print("thread failed:", thread.exception is not None)
    try:
        thread.watch()
    except ThreadException as error:
        print("caught in the main thread:")
        print(error)
        print("original exception objects:", error.exceptions)


if __name__ == "__main__":
    main()
