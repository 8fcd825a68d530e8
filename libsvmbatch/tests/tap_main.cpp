// SPDX-License-Identifier: MIT
// main() of the library tests.  With SVMBATCH_TAP=1 (the guest runner and
// make check set it) the output is TAP 13, one line per test, a skip with
// its reason, failure messages as comments; otherwise googletest's own.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace {

class TapPrinter : public ::testing::EmptyTestEventListener {
	void OnTestProgramStart(const ::testing::UnitTest &unit) override
	{
		std::printf("TAP version 13\n1..%d\n", unit.test_to_run_count());
		std::fflush(stdout);
	}

	void OnTestPartResult(const ::testing::TestPartResult &r) override
	{
		if (!r.failed())
			return;
		std::istringstream lines(r.message());
		std::string line;

		std::printf("# %s:%d: failure\n", r.file_name() ? r.file_name() : "?",
			    r.line_number());
		while (std::getline(lines, line))
			std::printf("#   %s\n", line.c_str());
	}

	void OnTestEnd(const ::testing::TestInfo &t) override
	{
		const ::testing::TestResult *r = t.result();
		std::string name = std::string(t.test_suite_name()) + "." + t.name();

		n_++;
		if (r->Skipped()) {
			std::string why;

			for (int i = 0; i < r->total_part_count(); i++)
				if (r->GetTestPartResult(i).skipped())
					why = r->GetTestPartResult(i).message();
			for (char &c : why)
				if (c == '\n')
					c = ' ';
			std::printf("ok %d %s # SKIP %s\n", n_, name.c_str(),
				    why.empty() ? "(no reason given)" : why.c_str());
		} else {
			std::printf("%s %d %s\n", r->Failed() ? "not ok" : "ok", n_, name.c_str());
		}
		/* Where a slow guest's minutes go: the tests of a second or more. */
		if (r->elapsed_time() >= 1000)
			std::printf("# slow: %s took %lld ms\n", name.c_str(),
				    static_cast<long long>(r->elapsed_time()));
		std::fflush(stdout);
	}

	void OnTestProgramEnd(const ::testing::UnitTest &unit) override
	{
		std::printf("# %d passed, %d failed, %d skipped\n", unit.successful_test_count(),
			    unit.failed_test_count(), unit.skipped_test_count());
	}

	int n_ = 0;
};

} // namespace

int main(int argc, char **argv)
{
	::testing::InitGoogleTest(&argc, argv);
	const char *tap = std::getenv("SVMBATCH_TAP");

	if (tap && std::string(tap) == "1") {
		auto &listeners = ::testing::UnitTest::GetInstance()->listeners();

		delete listeners.Release(listeners.default_result_printer());
		listeners.Append(new TapPrinter); /* googletest owns it */
	}
	return RUN_ALL_TESTS();
}
