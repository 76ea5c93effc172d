import clearance
import clearance.models
import clearance.testing
import clearance.tokens


def public_names(module):
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("clearance")
    )


def test_all_lists_exactly_the_public_names():
    for module in (clearance, clearance.models, clearance.testing, clearance.tokens):
        assert module.__all__ == sorted(module.__all__), module.__name__
        exported = set(module.__all__)
        defined = {n for n in public_names(module) if not n.isupper()}
        assert defined <= exported, (module.__name__, defined - exported)
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_library_never_imports_the_cli():
    import sys

    import clearance.cli  # noqa: F401  (the CLI imports the library)

    for name, module in list(sys.modules.items()):
        if name.startswith("clearance.") and not name.startswith("clearance.cli"):
            source = getattr(module, "__file__", "") or ""
            if source.endswith(".py"):
                with open(source, encoding="utf-8") as fh:
                    assert "clearance.cli" not in fh.read(), name
