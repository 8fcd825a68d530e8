// SPDX-License-Identifier: MIT
/*
 * Compiled as C99 and as C++17 with -Wall -Wextra -Werror -pedantic and run:
 * the uapi header must stand alone, and its layouts must be the fixed ones
 * that the module also checks at build time.
 */
#include <stddef.h>
#include <stdio.h>
#include <linux/svmbatch.h>

static int expect(const char *what, size_t seen, size_t want)
{
	if (seen == want)
		return 0;
	fprintf(stderr, "%s is %zu, want %zu\n", what, seen, want);
	return 1;
}

int main(void)
{
	int bad = 0;

	bad |= expect("sizeof(info)", sizeof(struct svmbatch_info), 40);
	bad |= expect("sizeof(range)", sizeof(struct svmbatch_range), 24);
	bad |= expect("sizeof(register)", sizeof(struct svmbatch_register), 48);
	bad |= expect("register.eventfd",
		      offsetof(struct svmbatch_register, eventfd), 40);
	bad |= expect("sizeof(unregister)", sizeof(struct svmbatch_unregister),
		      8);
	bad |= expect("sizeof(query)", sizeof(struct svmbatch_query), 72);
	bad |= expect("register.ranges",
		      offsetof(struct svmbatch_register, ranges), 8);
	bad |= expect("register.nr_pages",
		      offsetof(struct svmbatch_register, nr_pages), 32);
	bad |= expect("query.nr_pages",
		      offsetof(struct svmbatch_query, nr_pages), 32);
	bad |= expect("info.max_range_bytes",
		      offsetof(struct svmbatch_info, max_range_bytes), 32);
	bad |= expect("distinct commands", SVMBATCH_REGISTER != SVMBATCH_QUERY,
		      1);
	return bad;
}
