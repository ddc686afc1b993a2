/* The C unit tests' one assertion: print where a check failed and end the test with 1. */
#ifndef UNIT_CHECK_H
#define UNIT_CHECK_H

#include <stdio.h>

#define CHECK(condition)                                                                  \
    do {                                                                                  \
        if (!(condition)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

#endif
