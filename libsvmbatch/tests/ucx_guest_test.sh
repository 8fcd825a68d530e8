#!/bin/sh
# SPDX-License-Identifier: MIT
#
# examples/ucx_put_get in a test guest (kernel mode), over soft-RoCE: UCX
# maps a registration's merged ranges with ucp_mem_map and a second
# process puts into and gets from them with UCX's rc_verbs transport on
# the rxe device that svmbatch_rdma_tests made earlier in this guest.
# Client-server mode: the connection goes through rdmacm (rdma_ucm).  The
# worker-address mode would wire rc_verbs up through ud_verbs, which does
# not complete over rxe (Documentation/rdma.rst).  The guest runner ships
# the program as /usr/libexec/svmbatch/ucx_put_get with UCX's transport
# modules.  Prints TAP (the program's own).
set -u
PROG=/usr/libexec/svmbatch/ucx_put_get
DEV=svmb_rxe0
IP=10.199.0.1 # rdma_rxe_test.cpp's address on the rxe netdev

# The probes: the device svmbatch_rdma_tests made, rdma_ucm's node.  A
# guest built with rxe (SVMBATCH_EXPECT has rxe: tools/vmtest/init) must
# have both; elsewhere their absence is a skip.
missing=
[ -d /sys/class/infiniband/$DEV ] ||
	missing="no /sys/class/infiniband/$DEV (svmbatch_rdma_tests makes the device)"
[ -e /dev/infiniband/rdma_cm ] || missing="${missing:+$missing; }no /dev/infiniband/rdma_cm (rdma_ucm)"
if [ -n "$missing" ]; then
	echo "TAP version 13"
	echo "1..1"
	case ",${SVMBATCH_EXPECT:-}," in
	*,rxe,*) echo "not ok 1 UCX over soft-RoCE: $missing, in a guest built with rxe" ;;
	*) echo "ok 1 UCX over soft-RoCE # SKIP $missing" ;;
	esac
	exit 0
fi
# The GID of the device's IPv4 address (RoCE v2).
gid=
for f in "/sys/class/infiniband/$DEV"/ports/1/gids/*; do
	case $(cat "$f" 2>/dev/null) in
	0000:0000:0000:0000:0000:ffff:*) gid=${f##*/} && break ;;
	esac
done
UCX_TLS=rc_verbs UCX_NET_DEVICES=$DEV:1 UCX_IB_GID_INDEX=${gid:-auto} \
	exec "$PROG" --buffers 48 --server-ip $IP --expect-transport rc_verbs/$DEV
