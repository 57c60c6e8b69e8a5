"""rococo_eval.validity: the warnings about the numbers, which the package's quiet level does not drop, collected per
thread for the report."""

import logging
import threading

from rococo_eval.validity import VALIDITY_LOGGER, recorded, warn


def test_the_package_at_errors_only_still_lets_validity_warnings_through(caplog):
    package = logging.getLogger("rococo_eval")
    level = package.level
    package.setLevel(logging.ERROR)  # what `rococo-eval --quiet` does
    try:
        warn("the files disagree: %s", "80.00 vs 81.00")
        logging.getLogger("rococo_eval.scoring.plan").warning("a note that quiet drops")
    finally:
        package.setLevel(level)
    assert [(record.name, record.getMessage()) for record in caplog.records] == [
        (VALIDITY_LOGGER, "the files disagree: 80.00 vs 81.00")]


def test_a_record_keeps_its_own_threads_warnings():
    """The Space serves requests in threads: one request's report must not take another's warnings."""
    with recorded() as found:
        warn("mine")
        other = threading.Thread(target=warn, args=("another request's",))
        other.start()
        other.join()
    assert found == ["mine"]
