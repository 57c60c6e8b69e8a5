"""Placeholders: importable names that raise when used."""


def unavailable(name: str):
    """A class named ``name`` whose construction raises (the stand-in has nothing of torchvision's behaviour)."""

    def refuse(*args, **kwargs):
        raise RuntimeError(f"torchvision stand-in: {name} is not available in the reference environment")

    return type(name, (), {"__init__": refuse, "__call__": refuse})


def names(module_globals: dict, *wanted: str) -> None:
    """Define each of ``wanted`` in a module as a placeholder."""
    for name in wanted:
        module_globals[name] = unavailable(name)
