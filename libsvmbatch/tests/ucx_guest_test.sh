#!/bin/sh
# SPDX-License-Identifier: MIT
#
# examples/ucx_put_get in a test guest (kernel mode), over soft-RoCE: UCX
# maps a registration's merged ranges with ucp_mem_map and a second
# process puts into and gets from them with UCX's rc_verbs transport on
# the rxe device that svmbatch_rdma_tests made earlier in this guest.
# The guest runner ships the program as /usr/libexec/svmbatch/ucx_put_get
# with UCX's transport modules.  Prints TAP (the program's own).
set -u
PROG=/usr/libexec/svmbatch/ucx_put_get
DEV=svmb_rxe0

if [ ! -d /sys/class/infiniband/$DEV ]; then
	echo "TAP version 13"
	echo "1..1"
	echo "ok 1 UCX over soft-RoCE # SKIP no $DEV (svmbatch_rdma_tests makes it)"
	exit 0
fi
# The GID of the device's IPv4 address (RoCE v2): UCX's default, the
# first entry (IPv6 link-local), does not carry its UD wire-up here.
gid=
for f in "/sys/class/infiniband/$DEV"/ports/1/gids/*; do
	case $(cat "$f" 2>/dev/null) in
	0000:0000:0000:0000:0000:ffff:*) gid=${f##*/} && break ;;
	esac
done
UCX_TLS=${UCX_TLS:-tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-svmb0} \
	UCX_IB_GID_INDEX=${gid:-auto} exec "$PROG" --buffers 48
