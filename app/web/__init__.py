"""What both faces (the JSON API and the dashboard) share over HTTP: the
error handlers, strict request arguments, security headers, volume
downloads, upload bodies within their deadlines, the slots long requests
hold, and the gunicorn settings and worker the server runs with."""
