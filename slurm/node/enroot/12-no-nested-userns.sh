#!/bin/bash
# enroot hook (/etc/enroot/hooks.d/, mode 755): runs in the container's user
# namespace before the run's command. The command may make no user
# namespace of its own (as bwrap --disable-userns on runtime none): none
# nested in this one, whose limit is the container's alone.
echo 0 >/proc/sys/user/max_user_namespaces
