# Cross build for 64-bit Arm (Raspberry Pi 5, Apple Silicon under Linux,
# the DGX Spark's Grace CPU) with Debian's cross toolchain
# (crossbuild-essential-arm64) and the arm64 libraries of multiarch
# (scripts/setup). Programs run under qemu-user (scripts/test-arm).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Run with the arm64 C library of multiarch (libc6:arm64), not the cross
# toolchain's copy: qemu -L with both present mixes two builds of glibc and
# hangs in pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# pkg-config reads the arm64 .pc files (Debian ships no cross pkg-config wrapper).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
