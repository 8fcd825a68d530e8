#!/bin/sh
# SPDX-License-Identifier: MIT
#
# 60-svmbatch.rules applied by the real udev, in a test guest (busybox sh,
# as root, svmbatch.ko loaded): /dev/svmbatch becomes root:svmbatch 0660,
# so that a member of group svmbatch gets kernel mode and registers memory,
# and anybody else is refused.  Prints TAP.
#
# The guest runner ships the files (run.sh --file, svmbatch_guest_files
# in tools/lib.sh): systemd-udevd and udevadm from the host, the rule at
# /usr/lib/udev/rules.d/, setpriv, /usr/bin/svmbatch, examples/quickstart.cpp
# built as /usr/libexec/svmbatch/tests/quickstart, and tools/lib.sh (tap_ok,
# tap_done) as /usr/libexec/svmbatch/tests/lib.sh.  No other rule is
# shipped, so udev does nothing else.
set -u
UDEVD=/lib/systemd/systemd-udevd
# By full path: busybox sh would run its own setpriv applet.
SETPRIV=/usr/bin/setpriv
CLI=/usr/bin/svmbatch
RULE=/usr/lib/udev/rules.d/60-svmbatch.rules
QUICKSTART=/usr/libexec/svmbatch/tests/quickstart
# shellcheck source=tools/lib.sh
. /usr/libexec/svmbatch/tests/lib.sh || exit 1
tmp=$(mktemp -d)

ok() {	# ok DESCRIPTION: the last command's status; a failure shows $tmp/out
	tap_ok "$1" "$tmp/out"
}
as_user() {	# as_user UID GID GROUPS CMD...: output in $tmp/out, status in $rc
	uid=$1 gid=$2 groups=$3
	shift 3
	"$SETPRIV" --reuid "$uid" --regid "$gid" --groups "$groups" -- "$@" >"$tmp/out" 2>&1
	rc=$?
}
owner_mode() {
	stat -c '%U:%G %a' /dev/svmbatch
}

echo "TAP version 13"

# The package's postinst adds group svmbatch; here it is written by hand.
echo 'root:x:0:root' >/etc/group
echo 'svmbatch:x:990:alice' >>/etc/group
echo 'users:x:100:' >>/etc/group
{
	echo 'root:x:0:0:root:/root:/bin/sh'
	echo 'alice:x:1000:100::/tmp:/bin/sh'
	echo 'bob:x:1001:100::/tmp:/bin/sh'
} >/etc/passwd

owner_mode >"$tmp/out"
[ "$(cat "$tmp/out")" = "root:root 600" ]
ok "without udev the node is the kernel's default, root:root 0600"

mkdir -p /run
[ -r "$RULE" ] && "$UDEVD" --daemon --resolve-names=early >"$tmp/out" 2>&1
ok "systemd-udevd starts with only $RULE"

udevadm trigger --action=add --subsystem-match=misc --sysname-match=svmbatch >"$tmp/out" 2>&1 &&
	udevadm settle --timeout=60 >>"$tmp/out" 2>&1 &&
	owner_mode >>"$tmp/out" && [ "$(owner_mode)" = "root:svmbatch 660" ]
ok "after the add event /dev/svmbatch is root:svmbatch 0660"

as_user 1000 100 100,990 "$CLI" info --json
[ $rc = 0 ] && grep -q '"module_loaded": true.*"mode": "kernel"' "$tmp/out"
ok "a member of group svmbatch (uid 1000) opens it: kernel mode"

as_user 1000 100 100,990 "$QUICKSTART"
[ $rc = 0 ] && grep -qE '^quickstart: 3 buffers, [1-3] ranges?, [1-9][0-9]* pages pinned in kernel mode$' "$tmp/out"
ok "a member of group svmbatch registers memory (examples/quickstart.cpp)"
sed 's/^/# /' "$tmp/out"

as_user 1001 100 100 "$CLI" info --json
[ $rc = 0 ] && grep -q '"module_loaded": false.*"mode": "userspace", "reason": ".*Permission denied' "$tmp/out"
ok "a non-member (uid 1001) is refused (EACCES): userspace mode, and says why"

as_user 1001 100 100 "$QUICKSTART"
[ $rc = 1 ] && grep -q 'Permission denied' "$tmp/out"
ok "a non-member asking for kernel mode gets the EACCES error"

udevadm control --exit >"$tmp/out" 2>&1
ok "systemd-udevd exits"

rm -rf "$tmp"
tap_done udev_rule_test
