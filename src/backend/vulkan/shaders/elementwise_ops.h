// The op codes of elementwise.comp, one list for the shader and for
// vulkan_backend.cpp (this file is both valid GLSL and valid C++).
#ifndef SHOAL_ELEMENTWISE_OPS_H
#define SHOAL_ELEMENTWISE_OPS_H
#define ELEMENTWISE_SWIGLU 0u
#define ELEMENTWISE_GEGLU 1u
#define ELEMENTWISE_SCALE 2u
#define ELEMENTWISE_SOFTCAP 3u
#define ELEMENTWISE_ADD 4u
#define ELEMENTWISE_ADD_BIAS 5u
#define ELEMENTWISE_SIGMOID_MUL 6u
#define ELEMENTWISE_SWIGLU_OAI 7u
#endif
