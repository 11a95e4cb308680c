import importlib
import logging
import re

import machin.utils.logging as machin_logging
from machin.utils.logging import LOG_FORMAT, FakeLogger, default_logger


def _machin_handlers(logger):
    return [h for h in logger.handlers if getattr(h, "_machin_default", False)]


def test_default_logger_is_a_configured_standard_logger():
    assert isinstance(default_logger, logging.Logger)
    assert default_logger.name == "default_logger"
    assert default_logger.level == logging.INFO
    assert default_logger.propagate is False
    handlers = _machin_handlers(default_logger)
    assert len(handlers) == 1
    assert (
        handlers[0].formatter._fmt
        == LOG_FORMAT
        == "[%(asctime)s] <%(levelname)s>:%(name)s:%(message)s"
    )
    for method in ("debug", "info", "warning", "error", "critical", "exception"):
        assert callable(getattr(default_logger, method))


def test_default_logger_output_format():
    handler = _machin_handlers(default_logger)[0]
    record = default_logger.makeRecord(
        "default_logger", logging.INFO, __file__, 1, "hello %s", ("world",), None
    )
    line = handler.format(record)
    assert re.fullmatch(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] <INFO>:default_logger:hello world", line
    )


def test_handler_is_added_once_on_reload():
    module = importlib.reload(machin_logging)
    assert module.default_logger is default_logger
    assert len(_machin_handlers(default_logger)) == 1


def test_fake_logger_methods_accept_logging_arguments_and_do_nothing():
    logger = FakeLogger()
    assert logger.setLevel(logging.DEBUG) is None
    assert logger.debug("a %s", 1, extra={"k": 1}) is None
    assert logger.info("a %s", 1) is None
    assert logger.warning("a", stacklevel=2) is None
    assert logger.warn("a") is None
    assert logger.error("a %d", 3) is None
    assert logger.exception("a", exc_info=False) is None
    assert logger.critical("a") is None
    assert logger.log(logging.INFO, "a %s", "b") is None
