"""Plain functions over the models, owning every query and rule: no
request objects, unit-testable. What a user did wrong is a ServiceError
subclass (errors.py), which app/web/errors.py answers as JSON or a page and
app/admin/ as one line; ValueError stays inside slurm/ and the parsers
that call it."""
