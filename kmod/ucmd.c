// SPDX-License-Identifier: GPL-2.0-only
/*
 * The command in flight, struct svmbatch_ucmd: main.c reads the command
 * struct in and hands it to the command's handler, which answers through
 * svmbatch_ucmd_respond() here.
 */
#include <linux/minmax.h>
#include <linux/uaccess.h>

#include "svmbatch_priv.h"

/**
 * svmbatch_ucmd_respond() - copy a command struct back to user space
 * @ucmd: the command in flight
 *
 * Copies at most the size the caller declared, so a caller with an older,
 * smaller struct never has memory beyond it overwritten.
 *
 * Return: 0 or -EFAULT.
 */
int svmbatch_ucmd_respond(struct svmbatch_ucmd *ucmd)
{
	if (svmbatch_should_fail(-EFAULT))
		return -EFAULT;
	if (copy_to_user(ucmd->ubuffer, ucmd->cmd,
			 min_t(size_t, ucmd->user_size, ucmd->cmd_size)))
		return -EFAULT;
	return 0;
}
