/*
 * tests/test_headers.c - each public header compiles on its own, in C and
 * in C++-free strict C11, including nothing but the standard headers it names.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef MXOP_TEST_SOURCE_DIR
#define MXOP_TEST_SOURCE_DIR "."
#endif

static void compiles_alone(const char *header)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "printf '#include <mxop/%s>\\nint main(void) { return 0; }\\n' | "
             "${CC:-cc} -std=c11 -Wall -Wextra -Wstrict-prototypes -Werror -pedantic "
             "-I'%s/include' -x c - -fsyntax-only",
             header, MXOP_TEST_SOURCE_DIR);
    int status = system(cmd);
    cr_assert_eq(status, 0, "mxop/%s does not compile on its own", header);
}

Test(headers, op_h_alone, .timeout = 30)
{
    compiles_alone("op.h");
}

Test(headers, client_h_alone, .timeout = 30)
{
    compiles_alone("client.h");
}

Test(headers, types_h_alone, .timeout = 30)
{
    compiles_alone("types.h");
}

Test(headers, errors_h_alone, .timeout = 30)
{
    compiles_alone("errors.h");
}
