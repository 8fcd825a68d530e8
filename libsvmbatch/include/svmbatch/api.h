/* SPDX-License-Identifier: MIT */
#ifndef SVMBATCH_API_H
#define SVMBATCH_API_H

/* The library is built with hidden visibility; this marks its interface. */
#define SVMBATCH_API		 __attribute__((visibility("default")))
/* An old name kept for compatibility; msg names the new one. */
#define SVMBATCH_DEPRECATED(msg) __attribute__((deprecated(msg)))

#endif /* SVMBATCH_API_H */
