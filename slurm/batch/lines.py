import os
import select
import signal

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(sig, signal.SIG_IGN)
held = b""
while True:
    if held and not select.select([0], [], [], 0.2)[0]:
        os.write(1, held)
        held = b""
        continue
    data = os.read(0, 65536)
    if not data:
        break
    held += data
    cut = held.rfind(b"\n") + 1 or (len(held) if len(held) >= 1 << 20 else 0)
    view = memoryview(held)[:cut]
    while view:
        view = view[os.write(1, view):]
    held = held[cut:]
if held:
    os.write(1, held)
