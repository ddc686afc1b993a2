/* Shared declarations for hetgen's generated kernels. */
#ifndef HG_KERNELS_H
#define HG_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HG_UNUSED(x) ((void)(x))

#endif /* HG_KERNELS_H */
