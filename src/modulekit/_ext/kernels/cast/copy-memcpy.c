/* Identity "conversions": a plain copy of n elements of 2, 4 or 8 bytes (libc's memcpy,
 * itself tuned per CPU). The driver never calls them with dst == src. */
#include <string.h>

#include "cast.h"

void mk_x16_copy_ukernel__memcpy(size_t n, const void* input, void* output) {
    memcpy(output, input, n * 2);
}

void mk_x32_copy_ukernel__memcpy(size_t n, const void* input, void* output) {
    memcpy(output, input, n * 4);
}

void mk_x64_copy_ukernel__memcpy(size_t n, const void* input, void* output) {
    memcpy(output, input, n * 8);
}
