"""What both faces (the JSON API and the dashboard) share over HTTP: the
error handlers, strict request arguments, security headers, and volume
downloads."""
