// Shared by every shader: reading bytes, halves and int8s at any byte offset
// of a buffer declared as uint words (GGUF blocks are not word aligned).
#define BYTE(buf, o) ((buf[(o) >> 2] >> (((o) & 3u) << 3)) & 0xFFu)
#define U16(buf, o) (BYTE(buf, o) | (BYTE(buf, (o) + 1u) << 8))
#define U32(buf, o) (U16(buf, o) | (U16(buf, (o) + 2u) << 16))
#define F16(buf, o) unpackHalf2x16(U16(buf, o)).x
#define I8(buf, o) (int(BYTE(buf, o) ^ 128u) - 128)
