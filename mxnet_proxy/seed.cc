/*
 * mxnet_proxy/seed.cc - a call's seed from MXNet's random states.
 *
 * MXNet hands a CPU op its random generators as an array of std::mt19937
 * objects (seeded by mx.random.seed), which only C++ can draw from.  The
 * proxy draws one 64-bit seed from the first of them for each call and
 * passes it as the call's mxop seed: so mx.random.seed(s) makes mxop ops
 * that use random numbers reproducible, as MXNet's own ops are.
 */
#include <cstdint>
#include <random>

/* Declared in proxy.h, which is C (it includes mxop/client.h). */
extern "C" uint64_t mxop__px_seed_from(void *rng_cpu_states);

extern "C" uint64_t mxop__px_seed_from(void *rng_cpu_states)
{
    if (rng_cpu_states == nullptr)
        return 0;
    std::mt19937 &g = *static_cast<std::mt19937 *>(rng_cpu_states);
    uint64_t hi = g(), lo = g();
    uint64_t s = (hi << 32) | lo;
    return s != 0 ? s : 1;
}
