/*
 * mxop._torchalloc - PyTorch's CPU allocator in mxop shared memory (mxop.allocator).
 *
 * A tensor from torch.empty, an op's result or a data loader lives in
 * ordinary heap memory, which libmxop must copy into shared memory for
 * every call.  This allocator, installed as torch's CPU allocator, puts
 * every allocation of at least mxop_shared_min_bytes() in a block of
 * libmxop's shared heap instead, which a call passes by reference.
 * Smaller allocations, and any the heap cannot make, go to the allocator
 * that was installed before.
 *
 * Every DataPtr carries its own deleter (the shared heap's for its blocks,
 * the previous allocator's for the rest), so a tensor frees correctly
 * whichever allocator is installed when it dies: tensors made before
 * enabling, while enabled and after disabling all mix freely.
 *
 * torch keeps no CPU caching allocator in front of this one (the caching
 * allocator of c10/core/CPUAllocator.h serves the mobile build only):
 * at::empty asks c10::GetCPUAllocator() for every CPU storage.
 *
 * Python drives it through ctypes and hands it libmxop's functions as
 * addresses, so that one libmxop (one heap) serves every path.
 */
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "mxop/client.h"

namespace
{

using shared_alloc_fn = decltype(&mxop_shared_alloc);
using shared_free_fn = decltype(&mxop_shared_free);
using min_bytes_fn = decltype(&mxop_shared_min_bytes);

shared_alloc_fn fn_alloc;
shared_free_fn fn_free;
min_bytes_fn fn_min;

/* Above torch's own registrations (priority 0), so that this one wins,
 * and the same for putting the previous one back, which needs a priority
 * at least that of the installed one. */
constexpr uint8_t PRIORITY = 100;

/* Installed (between enable and disable).  A storage keeps the allocator it
 * was made with and grows through it (resize_), so allocate() asks this
 * rather than assume that being called means being on. */
std::atomic<bool> active{false};

std::atomic<uint64_t> n_shared{0};   /* allocations made in the shared heap */
std::atomic<uint64_t> n_fallback{0}; /* large ones the heap could not make */

/* Frees a shared-heap block: its DataPtr's deleter. */
void delete_shared(void *p)
{
    if (p != nullptr)
        fn_free(p);
}

struct SharedAllocator final : c10::Allocator {
    c10::Allocator *prev = nullptr; /* the allocator installed before; never freed */
    size_t min_bytes = 0;

    c10::DataPtr allocate(size_t n) override
    {
        if (n >= min_bytes && n > 0 && active.load(std::memory_order_relaxed)) {
            void *p = fn_alloc(n);
            if (p != nullptr) {
                n_shared.fetch_add(1, std::memory_order_relaxed);
                return {p, p, &delete_shared, c10::Device(c10::DeviceType::CPU)};
            }
            n_fallback.fetch_add(1, std::memory_order_relaxed);
        }
        return prev->allocate(n);
    }

    /* raw_allocate's pointers come back here without their DataPtr: a
     * block of the heap goes back to it (mxop_shared_free refuses, freeing
     * nothing, a pointer that is no block start), anything else was the
     * previous allocator's. */
    static void raw_delete(void *p);

    c10::DeleterFnPtr raw_deleter() const override
    {
        return prev != nullptr && prev->raw_deleter() != nullptr ? &raw_delete : nullptr;
    }

    void copy_data(void *dest, const void *src, std::size_t count) const override
    {
        default_copy_data(dest, src, count);
    }
};

SharedAllocator shared;
std::mutex mu;          /* guards installing and removing */
bool installed = false; /* SharedAllocator is torch's CPU allocator */

void SharedAllocator::raw_delete(void *p)
{
    if (p == nullptr || fn_free(p) == 0)
        return;
    shared.prev->raw_deleter()(p);
}

} // namespace

extern "C" {

/* libmxop's mxop_shared_alloc, mxop_shared_free and mxop_shared_min_bytes,
 * as addresses; before any other call. */
void mxop_torchalloc_init(void *alloc, void *free_, void *min_bytes)
{
    fn_alloc = reinterpret_cast<shared_alloc_fn>(alloc);
    fn_free = reinterpret_cast<shared_free_fn>(free_);
    fn_min = reinterpret_cast<min_bytes_fn>(min_bytes);
}

/* Installs the allocator (a no-op when it is installed); returns 0. */
int mxop_torchalloc_enable(void)
{
    std::lock_guard<std::mutex> g(mu);
    if (installed)
        return 0;
    c10::Allocator *cur = c10::GetCPUAllocator();
    /* The first enable fixes the fallback: after a disable the installed
     * one is that same allocator again. */
    if (shared.prev == nullptr)
        shared.prev = cur;
    shared.min_bytes = fn_min();
    c10::SetCPUAllocator(&shared, PRIORITY);
    installed = c10::GetCPUAllocator() == &shared;
    active.store(installed);
    return installed ? 0 : -1;
}

/* Puts the previous allocator back (a no-op when not installed). */
void mxop_torchalloc_disable(void)
{
    std::lock_guard<std::mutex> g(mu);
    if (!installed)
        return;
    c10::SetCPUAllocator(shared.prev, PRIORITY);
    installed = false;
    active.store(false);
}

/* 1 while the allocator is torch's CPU allocator. */
int mxop_torchalloc_enabled(void)
{
    std::lock_guard<std::mutex> g(mu);
    return installed && c10::GetCPUAllocator() == &shared ? 1 : 0;
}

/* Allocations made in the shared heap, and large ones that fell back. */
void mxop_torchalloc_counts(uint64_t *shared_allocs, uint64_t *fallbacks)
{
    *shared_allocs = n_shared.load();
    *fallbacks = n_fallback.load();
}

} // extern "C"
