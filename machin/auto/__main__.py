"""``python -m machin.auto``: generate a config, train from it, play, tune or export the result."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from machin.frame.algorithms.config import ConfigError

from . import config as auto_config
from . import export as exporting
from . import launcher
from . import tune as tuning


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
    _add_tune(commands)
    _add_export(commands)
    return parser


def _add_tune(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser(
        "tune", help="search hyperparameters with Optuna (pip install machin[tune])"
    )
    tune.add_argument("config", help="a config file; its 'tune' key is the search space")
    tune.add_argument("--trials", type=int, default=20, help="trials to run (default 20)")
    tune.add_argument(
        "--steps", type=int, default=None, help="max_steps of each trial (default: the config's)"
    )
    tune.add_argument(
        "--seed", type=int, default=None, help="seed of the trials (default: the config's)"
    )
    tune.add_argument(
        "--out", default="tune", help="folder for best.json and the trials table (default: tune)"
    )
    tune.add_argument(
        "--storage",
        default=None,
        help="Optuna storage URL that keeps the study, e.g. sqlite:///study.db "
        "(default: in memory); a study of the same name there is resumed",
    )
    tune.add_argument(
        "--study-name", default=None, help="name of the study (default: <frame>_<env>)"
    )


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


def _tune(args: argparse.Namespace) -> None:
    try:
        tuning.require_optuna()
    except ImportError as error:  # reported like a config error: one line, exit status 2
        raise ConfigError(str(error)) from error
    found = tuning.tune(
        auto_config.load(args.config),
        args.trials,
        args.out,
        steps=args.steps,
        seed=args.seed,
        storage=args.storage,
        study_name=args.study_name,
    )
    print(f"best trial {found.best_trial}: return {found.best_value:.2f} with {found.best_params}")
    print(f"wrote {found.paths['best']} and {found.paths['csv']}")


def _add_export(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser(
        "export", help="write the trained policy alone, for deployment (ONNX, TorchScript, .pt2)"
    )
    export.add_argument("run_dir", help="a run directory written by train")
    export.add_argument("--format", required=True, help=f"one of {', '.join(exporting.FORMATS)}")
    export.add_argument(
        "-o",
        "--output",
        default=None,
        help="file to write (default: policy.onnx, policy.torchscript.pt or policy.pt2 in RUN_DIR)",
    )
    export.add_argument(
        "--best",
        action="store_true",
        help="export the best evaluated networks (checkpoints/) instead of the final ones",
    )


def _export(args: argparse.Namespace) -> None:
    checkpoint = "checkpoints" if args.best else launcher.FINAL_DIR
    path = exporting.export_policy(args.run_dir, args.format, args.output, checkpoint)
    print(f"wrote {path}")


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "list":
        print("\n".join(auto_config.SUPPORTED))
        return 0
    handlers = {
        "generate": _generate,
        "train": _train,
        "enjoy": _enjoy,
        "tune": _tune,
        "export": _export,
    }
    try:
        handlers[args.command](args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
