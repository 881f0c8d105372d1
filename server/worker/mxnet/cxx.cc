/*
 * server/worker/mxnet/cxx.cc - the C++ the MXNet layer cannot do without.
 *
 * MXNet hands a CPU op its random generators as an array of 1024
 * std::mt19937 objects, so only C++ can make them.  And at load, asking an
 * op for its arity with no attributes may make the library throw (a
 * required attribute is missing): that throw is expected there, so it is
 * caught here, in the one place C++ can catch it.  Exceptions during a
 * call are deliberately not caught: they end the worker, like any crash,
 * since the library may be left in any state.
 */
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

extern "C" {
#include "server/worker/mxnet/mxnet.h"
}

namespace {

/* MXNet's number of CPU random states (its kNumCPURandStates... as the ABI fixes it). */
constexpr int kStates = 1024;

std::mt19937 *states;

uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The first word of each state right after seeding: a state that drew since differs there. */
uint32_t first_word[kStates];

uint32_t first_word_of(const std::mt19937 &g)
{
    /*
     * Both libstdc++ and libc++ keep the 624-word state array first in the
     * object; a draw after seeding regenerates it, so its first word moves.
     * The library shares this layout with the worker anyway: it casts the
     * same pointer to std::mt19937 *.
     */
    uint32_t w;
    std::memcpy(&w, &g, sizeof(w));
    return w;
}

} // namespace

extern "C" void *mxop__mx_cpu_rand_states(uint64_t seed, int reseed)
{
    if (states == nullptr) {
        states = new (std::nothrow) std::mt19937[kStates];
        if (states == nullptr)
            return nullptr;
        reseed = 1;
    }
    if (reseed) {
        for (int i = 0; i < kStates; i++) {
            states[i].seed(static_cast<uint32_t>(splitmix64(seed + static_cast<uint64_t>(i))));
            first_word[i] = first_word_of(states[i]);
        }
    }
    return states;
}

extern "C" int mxop__mx_rand_used(void)
{
    if (states == nullptr)
        return 0;
    for (int i = 0; i < kStates; i++)
        if (first_word_of(states[i]) != first_word[i])
            return 1;
    return 0;
}

extern "C" int mxop__mx_probe_parse(const mxop__mx_abi_t *abi, mxop__mx_fn parse, int *num_in,
                                    int *num_out)
{
    static const char *const none[1] = {nullptr};
    try {
        return abi->parse_attrs(parse, none, none, 0, num_in, num_out);
    } catch (...) {
        *num_in = *num_out = -1;
        return MXOP__MX_FAIL;
    }
}

extern "C" int mxop__mx_probe_mutate(const mxop__mx_abi_t *abi, mxop__mx_fn mutate, int **indices,
                                     int *n)
{
    static const char *const none[1] = {nullptr};
    try {
        return abi->mutate_inputs(mutate, none, none, 0, indices, n);
    } catch (...) {
        *indices = nullptr;
        *n = 0;
        return MXOP__MX_FAIL;
    }
}
