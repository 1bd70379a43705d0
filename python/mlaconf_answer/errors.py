"""The one exception this package raises for unusable input (the CLI maps it to exit 2)."""


class FixtureError(ValueError):
    pass
