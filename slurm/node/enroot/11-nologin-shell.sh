#!/bin/bash
# An enroot hook (/etc/enroot/hooks.d/): enroot runs every command through
# the user's login shell as the container's /etc/passwd gives it, and an
# org's Unix user has none (/usr/sbin/nologin): it and root get /bin/sh in
# the container. The file changed is the container's (the run's overlay).
set -eu
readonly passwd="${ENROOT_ROOTFS}/etc/passwd"
[ -x "${ENROOT_ROOTFS}/bin/sh" ] && [ -f "${passwd}" ] || exit 0
uid=$(id -u)
tmp=$(mktemp -p "${ENROOT_ROOTFS}/etc" .passwd.XXXXXX)
trap 'rm -f "${tmp}"' EXIT
awk -F: -v OFS=: -v uid="${uid}" \
  '($3 == uid || $3 == 0) && $7 ~ /\/(nologin|false)$/ { $7 = "/bin/sh" } { print }' \
  "${passwd}" > "${tmp}"
chmod --reference="${passwd}" "${tmp}"
mv "${tmp}" "${passwd}"
