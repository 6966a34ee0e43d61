/* pluglog/_zigzag.h: Kafka's zig-zag varints, written, for the client's C
 * modules (_clientcodec.c, _producerbuffer.c). */
#ifndef PLUGLOG_ZIGZAG_H
#define PLUGLOG_ZIGZAG_H

#include <stdint.h>

static inline int
zigzag_size(int64_t value)
{
    uint64_t n = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int size = 1;
    while (n > 0x7F) {
        n >>= 7;
        size++;
    }
    return size;
}

static inline unsigned char *
put_zigzag(unsigned char *out, int64_t value)
{
    uint64_t n = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (n > 0x7F) {
        *out++ = (unsigned char)((n & 0x7F) | 0x80);
        n >>= 7;
    }
    *out++ = (unsigned char)n;
    return out;
}

#endif
