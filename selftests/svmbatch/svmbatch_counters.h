/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What svmbatch leaves pinned, as user space sees it: VmPin of this process
 * (mm->pinned_vm, which REGISTER charges) and the module's global counters
 * in debugfs "stats".  Plain C with no kselftest dependency, so that the
 * selftests (through svmbatch_utils.h) and bench/kmod_bench.c read
 * them the same way.
 */
#ifndef __SELFTEST_SVMBATCH_COUNTERS_H
#define __SELFTEST_SVMBATCH_COUNTERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SVMBATCH_DEBUGFS	"/sys/kernel/debug/svmbatch"
#define SVMBATCH_STATS		SVMBATCH_DEBUGFS "/stats"

/* The "Key:   value" line of a /proc file such as status, -1 if absent. */
static inline long long proc_field(const char *path, const char *key)
{
	char line[256];
	long long val = -1;
	size_t klen = strlen(key);
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			val = strtoll(line + klen + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return val;
}

/* VmPin of this process (mm->pinned_vm) in kB, -1 if it cannot be read. */
static inline long long vmpin_kb(void)
{
	return proc_field("/proc/self/status", "VmPin");
}

/* One "name value" line of the stats file. */
struct svmbatch_stat {
	char name[48];
	unsigned long long val;
};

/* Up to @max lines of the stats file; how many, or -1 (errno) if unreadable. */
static inline int read_stats(struct svmbatch_stat *stats, int max)
{
	char line[256];
	int n = 0;
	FILE *f = fopen(SVMBATCH_STATS, "re");

	if (!f)
		return -1;
	while (n < max && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%47s %llu", stats[n].name, &stats[n].val) == 2)
			n++;
	}
	fclose(f);
	return n;
}

/* Counter @name among the @n in @stats, NULL if absent. */
static inline const struct svmbatch_stat *
stat_find(const struct svmbatch_stat *stats, int n, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(stats[i].name, name))
			return &stats[i];
	return NULL;
}

#define SVMBATCH_MAX_STATS 32

/* Value of global counter @name now, or -1 if the stats file lacks it. */
static inline long long stat_get(const char *name)
{
	struct svmbatch_stat stats[SVMBATCH_MAX_STATS];
	const struct svmbatch_stat *s;

	s = stat_find(stats, read_stats(stats, SVMBATCH_MAX_STATS), name);
	return s ? (long long)s->val : -1;
}

#endif /* __SELFTEST_SVMBATCH_COUNTERS_H */
