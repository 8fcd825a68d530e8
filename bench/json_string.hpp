// SPDX-License-Identifier: MIT
// JSON strings for what the benchmarks and the svmbatch command print: the
// one escaping both use.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace svmbatch::json {

/// s as the inside of a JSON string.
inline std::string escape(std::string_view s)
{
	std::string out;

	for (char c : s) {
		if (c == '"' || c == '\\') {
			out += '\\';
			out += c;
		} else if (static_cast<unsigned char>(c) < 0x20) {
			char buf[8];
			std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
			out += buf;
		} else {
			out += c;
		}
	}
	return out;
}

/// "s", quoted and escaped.
inline std::string quote(std::string_view s)
{
	/* Appended, not "\"" + ...: GCC 12 -O2 warns falsely (-Wrestrict) on
	 * operator+(const char *, std::string &&). */
	std::string out(1, '"');
	out += escape(s);
	out += '"';
	return out;
}

} // namespace svmbatch::json
