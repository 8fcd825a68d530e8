// SPDX-License-Identifier: MIT
/*
 * Compiled as C99 and as C++17 with -Wall -Wextra -Werror -pedantic: the
 * uapi header must stand alone, and its layouts must not depend on the ABI
 * (the same sizes with -m32 where a 32-bit toolchain is installed).
 */
#include <stddef.h>
#include <string.h>
#include <linux/svmbatch.h>

#define CHECK(name, cond) typedef char name[(cond) ? 1 : -1]

CHECK(info_size, sizeof(struct svmbatch_info) == 40);
CHECK(range_size, sizeof(struct svmbatch_range) == 24);
CHECK(register_size, sizeof(struct svmbatch_register) == 40);
CHECK(unregister_size, sizeof(struct svmbatch_unregister) == 8);
CHECK(query_size, sizeof(struct svmbatch_query) == 72);
CHECK(register_ranges, offsetof(struct svmbatch_register, ranges) == 8);
CHECK(register_nr_pages, offsetof(struct svmbatch_register, nr_pages) == 32);
CHECK(query_nr_pages, offsetof(struct svmbatch_query, nr_pages) == 32);
CHECK(info_max_bytes, offsetof(struct svmbatch_info, max_range_bytes) == 32);

int main(void)
{
	struct svmbatch_register r;

	memset(&r, 0, sizeof(r));
	r.size = sizeof(r);
	r.error_index = SVMBATCH_NO_INDEX;
	return !(r.size == 40 && SVMBATCH_REGISTER != SVMBATCH_QUERY);
}
