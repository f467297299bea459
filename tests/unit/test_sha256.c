/* test_sha256.c - FIPS 180-4 test vectors and block-boundary lengths */
#include <config.h>

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"
#include "unit.h"

START_TEST(test_sha256__empty)
{
	char hex[SHA256_HEX_LEN + 1];

	sha256_hex("", 0, hex);
	ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}
END_TEST

START_TEST(test_sha256__abc)
{
	char hex[SHA256_HEX_LEN + 1];

	sha256_hex("abc", 3, hex);
	ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(test_sha256__two_blocks)
{
	static const char msg[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char hex[SHA256_HEX_LEN + 1];

	/* 56 bytes: the length no longer fits, padding spills into a second block */
	sha256_hex(msg, strlen(msg), hex);
	ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(test_sha256__million_a)
{
	char hex[SHA256_HEX_LEN + 1];
	char *m = malloc(1000000);

	ck_assert_ptr_nonnull(m);
	memset(m, 'a', 1000000);
	sha256_hex(m, 1000000, hex);
	free(m);
	ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

START_TEST(test_sha256__lengths_55_to_64)
{
	/* Digests of 'a' * n for the lengths around the padding boundary. */
	static const char *const want[] = {
		[55] = "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318",
		[56] = "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a",
		[63] = "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34",
		[64] = "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
	};
	char buf[64], hex[SHA256_HEX_LEN + 1];
	size_t n;

	memset(buf, 'a', sizeof(buf));
	for (n = 55; n <= 64; n++) {
		if (!want[n])
			continue;
		sha256_hex(buf, n, hex);
		ck_assert_msg(strcmp(hex, want[n]) == 0, "length %zu: %s", n, hex);
	}
}
END_TEST

Suite *make_suite_sha256(void)
{
	Suite *s = suite_create("sha256");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_sha256__empty);
	tcase_add_test(tc, test_sha256__abc);
	tcase_add_test(tc, test_sha256__two_blocks);
	tcase_add_test(tc, test_sha256__million_a);
	tcase_add_test(tc, test_sha256__lengths_55_to_64);
	suite_add_tcase(s, tc);
	return s;
}
