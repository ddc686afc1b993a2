/* hetgen device interface: how a controller drives a child device.
 *
 * One small vtable, the same for every transport: in-process (the child's runtime or device model
 * linked into the controller's library) or out-of-process (a byte stream to another process or a
 * board). Offsets are into the device's own memory; the controller's memory plan assigns them.
 */
#ifndef HG_DEVICE_H
#define HG_DEVICE_H

#include <stddef.h>
#include <stdint.h>

struct hg_device;

typedef struct hg_device_ops {
    /* Check that `bytes` of device memory are available to this program (once, at init). */
    int (*alloc)(struct hg_device *device, uint64_t bytes);
    int (*copy_in)(struct hg_device *device, uint64_t dst_offset, const void *src, uint64_t bytes);
    int (*copy_out)(struct hg_device *device, void *dst, uint64_t src_offset, uint64_t bytes);
    /* Start sub-program `program`; it may run asynchronously until `wait`. */
    int (*invoke)(struct hg_device *device, uint32_t program);
    int (*wait)(struct hg_device *device);
} hg_device_ops;

typedef struct hg_device {
    const hg_device_ops *ops;
    const void *config;
    void *state;
} hg_device;

#endif /* HG_DEVICE_H */
