"""The `div` command: HTTP only, no app imports."""
