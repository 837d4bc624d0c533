"""Plain functions over the models: no request objects, unit-testable."""
