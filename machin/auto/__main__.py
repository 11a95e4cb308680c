"""``python -m machin.auto``: generate a config, train from it, play the result."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from machin.frame.algorithms.config import ConfigError

from . import config as auto_config
from . import launcher


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m machin.auto", description="Train machin's algorithms from config files."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the algorithms generate supports")
    generate = commands.add_parser(
        "generate", help="write a config with default networks for an environment"
    )
    generate.add_argument(
        "--algo", required=True, help=f"one of {', '.join(auto_config.SUPPORTED)}"
    )
    generate.add_argument("--env", required=True, help="a gymnasium id, e.g. CartPole-v1")
    generate.add_argument(
        "-o",
        "--output",
        default=None,
        help="file to write (.json, or .yaml with PyYAML); default: print it",
    )
    generate.add_argument(
        "--steps", type=int, default=50000, help="max_steps of the run (default 50000)"
    )
    generate.add_argument("--seed", type=int, default=0, help="seed of the run (default 0)")
    train = commands.add_parser("train", help="train from a config")
    train.add_argument("config", help="a config file (.json, or .yaml with PyYAML)")
    train.add_argument(
        "--log-dir", default=None, help="run directory (default: a new folder in root_dir)"
    )
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --log-dir (needs trainer_config.save_every)",
    )
    enjoy = commands.add_parser("enjoy", help="play the networks of a run directory")
    enjoy.add_argument("run_dir", help="a run directory written by train")
    enjoy.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    enjoy.add_argument("--gif", default=None, help="record the episodes to this GIF file")
    enjoy.add_argument(
        "--best",
        action="store_true",
        help="play the best evaluated networks (checkpoints/) instead of the final ones",
    )
    return parser


def _generate(args: argparse.Namespace) -> None:
    config = auto_config.generate(args.algo, args.env, max_steps=args.steps, seed=args.seed)
    if args.output is None:
        print(json.dumps(config, indent=2))
    else:
        auto_config.save(config, args.output)
        print(f"wrote {args.output}")


def _train(args: argparse.Namespace) -> None:
    if args.resume and args.log_dir is None:
        raise ConfigError("--resume needs --log-dir, the run directory to continue")
    run_dir, result = launcher.train(auto_config.load(args.config), args.log_dir, args.resume)
    print(f"trained {result.episodes} episodes, {result.steps} steps; run directory: {run_dir}")


def _enjoy(args: argparse.Namespace) -> None:
    checkpoint = "checkpoints" if args.best else launcher.FINAL_DIR
    returns = launcher.enjoy(args.run_dir, args.episodes, args.gif, checkpoint)
    for index, value in enumerate(returns):
        print(f"episode {index + 1}: return {value:.2f}")
    if args.gif:
        print(f"wrote {args.gif}")


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "list":
        print("\n".join(auto_config.SUPPORTED))
        return 0
    handlers = {"generate": _generate, "train": _train, "enjoy": _enjoy}
    try:
        handlers[args.command](args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
