/*
 * mxop._torchops - torch.ops.mxop.<op>'s CPU and Autograd kernels in C++.
 *
 * Through Python kernels, a call of torch.ops.mxop.relu costs about 1 us
 * of the dispatcher converting its arguments to Python objects and taking
 * the GIL, before mxop's own Python layer runs.  These boxed kernels make
 * the common call (CPU tensors, no keywords, no autograd graph, a shape
 * signature seen before) without Python and without the GIL: they hand
 * libmxop each input as its data pointer (libmxop finds the region it lies
 * in, or stages it), allocate the outputs with mxop_array_alloc (arena or
 * shared heap, as libmxop is set), call mxop_forward and return tensors
 * over the blocks, which mxop_array_free takes back when the last tensor
 * dies.  Nothing here knows regions, dtype numbers or error numbers of its
 * own: dtypes come from libmxop's names at load, errors from errors.h.
 *
 * Every other call goes to the shadow op mxop_py::<op>, which carries the
 * same schema and the Python kernels (python/mxop/_torch_library.py): the
 * autograd graph, keywords, shared storages to register, first calls of a
 * signature (whose outputs then teach this file the signature), errors
 * (raised as the mxop exception by mxop_py::_raise).  So the behaviour is
 * the Python registration's; only the cost of the plain call changes.
 *
 * Python drives it through ctypes (extern "C" below) and hands it
 * libmxop's functions as addresses, so that one libmxop serves every path.
 */
#include <ATen/Functions.h>
#include <ATen/MapAllocator.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>
#include <torch/version.h>

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxop/client.h"

namespace
{

/* torch 2 holds autograd nodes in intrusive pointers, torch 1.13 in shared ones. */
#if TORCH_VERSION_MAJOR >= 2
template <class T, class... A> c10::intrusive_ptr<T> make_node(A &&...a)
{
    return c10::make_intrusive<T>(std::forward<A>(a)...);
}
#define NODE_SELF() getptr()
#else
template <class T, class... A> std::shared_ptr<T> make_node(A &&...a)
{
    return std::make_shared<T>(std::forward<A>(a)...);
}
#define NODE_SELF() shared_from_this()
#endif

using call_fn = int (*)(mxop_client_t *, const mxop_op_t *, const mxop_call_t *,
                        const mxop_array_t *, int, mxop_array_t *, int);
using alloc_fn = int (*)(mxop_client_t *, int32_t, int32_t, const int64_t *, mxop_array_t *);
using free_fn = void (*)(mxop_client_t *, mxop_array_t *);
using close_fn = void (*)(mxop_client_t *);

call_fn fn_forward;
call_fn fn_backward;
alloc_fn fn_alloc;
free_fn fn_free;
close_fn fn_close;

/* The worker pid of the C++ call in flight, for the Ctrl-C watcher
 * (python/mxop/_interrupt.py): one slot, as the Python path's. */
std::atomic<long> inflight{0};

/* False: every call goes to the Python kernels (the bench's comparison). */
std::atomic<bool> enabled{true};

/* Calls made here (not handed to Python): how tests know which path ran. */
std::atomic<long> calls_here{0};

/* Guards every table below; held only to copy values out, never across a call. */
std::mutex mu;

/* A client as the kernels see it: the Python Client owns the session; the
 * blocks made here keep this record (and the session) alive, so that the
 * session is closed by the last of them when Python has let go of it. */
struct Client {
    mxop_client_t *h = nullptr;
    pid_t pid = 0;      /* a forked child must not use its parent's session */
    bool usable = true; /* false once Python began to close it */
    bool released = false;
    long live = 0; /* blocks made here and not yet freed */
    long wpid = 0; /* the session's worker pid (0: unknown) */
};

struct Spec {
    int32_t dtype, ndim;
    int64_t shape[MXOP_MAX_DIMS];
};

struct Op {
    std::shared_ptr<Client> client;
    const mxop_op_t *op = nullptr;
    const mxop_call_t *call = nullptr; /* the call without keywords */
    bool fast = false;                 /* no in-place, strided or dynamic-shape outputs */
    bool backward = false;             /* the op has a backward */
    int n_in = 0, n_out = 0;
    std::unordered_map<std::string, std::vector<Spec>> specs; /* per input signature */
};

std::unordered_map<void *, std::shared_ptr<Client>> clients;
std::unordered_map<std::string, std::shared_ptr<Op>> ops;
std::vector<std::unique_ptr<torch::Library>> libs; /* registrations live as long as these */
thread_local std::string last_error;

/* torch's dtypes against libmxop's dtype codes, both ways: filled once, at
 * load and before any kernel is registered (mxop_py::_dtypes below, from
 * libmxop's names), and only read after.  A dtype of one side that the
 * other lacks maps to -1 / nothing: such calls go to the Python kernels. */
using dtype_codes = std::array<int32_t, static_cast<size_t>(at::ScalarType::NumOptions)>;

dtype_codes unmapped()
{
    dtype_codes a;
    a.fill(-1);
    return a;
}

dtype_codes mx_of_torch = unmapped();
std::vector<at::ScalarType> torch_of_mx;

int32_t code_of(at::ScalarType t)
{
    size_t i = static_cast<size_t>(t);
    return i < mx_of_torch.size() ? mx_of_torch[i] : -1;
}

/* The torch dtype of libmxop dtype `code`; only for codes code_of gave. */
at::ScalarType type_of(int32_t code)
{
    return torch_of_mx[static_cast<size_t>(code)];
}

/* The CPU kernel of mxop_py::_dtypes(int[] codes, Tensor[] samples):
 * libmxop dtype codes[i] is the dtype of samples[i].  Python finds each
 * libmxop dtype's torch dtype by the framework name libmxop gives it, and
 * the dispatcher hands the samples over as tensors, whose scalar type is
 * what this file compares: libtorch exports no function from a dtype's
 * name to its ScalarType. */
void learn_dtypes(const c10::OperatorHandle &, torch::jit::Stack *s)
{
    std::vector<int64_t> codes = (*s)[s->size() - 2].toIntVector();
    std::vector<at::Tensor> samples = (*s)[s->size() - 1].toTensorVector();
    torch::jit::drop(*s, 2);
    TORCH_CHECK(codes.size() == samples.size(), "mxop_py::_dtypes: ", codes.size(), " codes for ",
                samples.size(), " samples");
    dtype_codes mx = unmapped();
    std::vector<at::ScalarType> tt;
    for (size_t i = 0; i < codes.size(); i++) {
        /* libmxop's codes are small numbers on the wire; anything else is a
         * caller's mistake, refused before it sizes a table. */
        TORCH_CHECK(codes[i] >= 0 && codes[i] < 4096, "mxop_py::_dtypes: bad code ", codes[i]);
        size_t k = static_cast<size_t>(codes[i]);
        if (tt.size() <= k)
            tt.resize(k + 1, at::ScalarType::Undefined);
        tt[k] = samples[i].scalar_type();
        mx[static_cast<size_t>(tt[k])] = static_cast<int32_t>(k);
    }
    /* Once: the kernels read the tables without the lock, and a second
     * naming (a stray call of this op) could change what a code means under
     * a call in flight. */
    std::lock_guard<std::mutex> g(mu);
    TORCH_CHECK(torch_of_mx.empty(), "mxop_py::_dtypes: the dtypes are named already");
    mx_of_torch = mx;
    torch_of_mx = std::move(tt);
}

c10::OperatorHandle handle(const std::string &qualified)
{
    return c10::Dispatcher::singleton().findSchemaOrThrow(qualified.c_str(), "");
}

/* Takes n blocks off c's count (blocks reserved and not made, or freed);
 * closes the session when Python let go of it and no block is left. */
void unreserve(const std::shared_ptr<Client> &c, long n)
{
    mxop_client_t *close_now = nullptr;
    {
        std::lock_guard<std::mutex> g(mu);
        c->live -= n;
        if (c->live == 0 && c->released && c->h != nullptr) {
            close_now = c->h;
            c->h = nullptr;
        }
    }
    if (close_now != nullptr)
        fn_close(close_now);
}

void free_block(const std::shared_ptr<Client> &c, mxop_array_t *a)
{
    mxop_client_t *h;
    {
        std::lock_guard<std::mutex> g(mu);
        h = c->h;
    }
    /* Outside the lock: libmxop may wait for the client's own lock, held by
     * another thread's call.  The session stays open meanwhile, since this
     * block still counts in c->live.  A shared-heap block (an output made
     * while libmxop gives shared outputs: region 0) needs no session. */
    if (h != nullptr || a->region == MXOP_REGION_HEAP)
        fn_free(h, a);
    unreserve(c, 1);
}

/* A storage shared with other processes (share_memory_()): the Python
 * kernel registers it as a region, for the zero-copy call. */
bool shared_storage(const at::Tensor &t)
{
    const c10::DataPtr &d = t.storage().data_ptr();
    return at::MapAllocator::fromDataPtr(d) != nullptr ||
           at::RefcountedMapAllocator::fromDataPtr(d) != nullptr;
}

/* A tensor with real memory and integer sizes: not a fake, functional or
 * other Python-dispatched tensor (torch.compile, torch.export and opcheck
 * trace with those), nor one with symbolic sizes, which have no data to
 * send and whose sizes cannot even be read here. */
bool plain_tensor(const at::Tensor &t)
{
    if (!t.defined())
        return false;
#if TORCH_VERSION_MAJOR >= 2
    const c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (impl->has_symbolic_sizes_strides() || impl->is_python_dispatch() ||
        t.key_set().has(c10::DispatchKey::Functionalize) || !t.has_storage())
        return false;
#endif
    return !t.is_meta();
}

/* The record of CPU tensor t: its data pointer as a heap array, which
 * libmxop passes by reference when it lies in memory of the client's (its
 * arena, its regions, the shared heap) and stages otherwise.  False for a
 * tensor the Python path must take: not plain, or in a storage shared with
 * other processes, which that path registers as a region of its own. */
bool pack(const at::Tensor &t, mxop_array_t *r)
{
    if (!plain_tensor(t))
        return false;
    int32_t code = code_of(t.scalar_type());
    if (!t.defined() || !t.device().is_cpu() || t.layout() != at::kStrided || code < 0 ||
        t.dim() > MXOP_MAX_DIMS || t.numel() == 0 || !t.is_contiguous() || shared_storage(t))
        return false;
    std::memset(r, 0, sizeof *r);
    r->data = t.data_ptr();
    r->dtype = code;
    r->ndim = static_cast<int32_t>(t.dim());
    for (int d = 0; d < r->ndim; d++)
        r->shape[d] = t.size(d);
    r->nbytes = t.nbytes();
    r->region = MXOP_REGION_HEAP;
    return true;
}

/* A tensor over block a of client c, which frees the block when it dies. */
at::Tensor wrap(const std::shared_ptr<Client> &c, const mxop_array_t &a)
{
    std::vector<int64_t> sizes(a.shape, a.shape + a.ndim);
    mxop_array_t b = a;
    return at::from_blob(
        b.data, sizes, [c, b](void *) mutable { free_block(c, &b); },
        at::TensorOptions().dtype(type_of(a.dtype)));
}

/* Raises the mxop exception of a failed call (the Python kernel of
 * mxop_py::_raise raises it; the check below is never reached). */
[[noreturn]] void raise_rc(const std::string &name, int rc)
{
    torch::jit::Stack st{at::empty({0}), name, static_cast<int64_t>(rc)};
    at::AutoDispatchBelowADInplaceOrView below;
    handle("mxop_py::_raise").redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &st);
    TORCH_CHECK(false, "mxop op '", name, "' failed (", rc, ")");
}

bool is_float(int32_t code)
{
    return at::isFloatingType(type_of(code));
}

/* The plain call, done here; false (nothing done, the stack untouched)
 * when it is one for the Python kernel.  With `grad`, only for an op with
 * a backward and floating-point inputs and outputs; *used gets the
 * binding the call used (what its backward must use too). */
bool call_here(const std::string &name, size_t n_args, torch::jit::Stack *s, bool grad = false,
               std::shared_ptr<Op> *used = nullptr)
{
    std::shared_ptr<Op> op;
    std::shared_ptr<Client> c;
    std::vector<Spec> specs;
    mxop_array_t in[MXOP_MAX_TENSORS], out[MXOP_MAX_TENSORS];
    long wpid;
    if (!enabled.load(std::memory_order_relaxed))
        return false;
    auto args = torch::jit::last(*s, n_args);
    {
        std::lock_guard<std::mutex> g(mu);
        auto it = ops.find(name);
        if (it == ops.end() || !it->second->fast || !it->second->client)
            return false;
        op = it->second;
        c = op->client;
        if (c->h == nullptr || !c->usable || c->pid != getpid() || c->wpid == 0 ||
            op->n_in > MXOP_MAX_TENSORS || op->n_out > MXOP_MAX_TENSORS ||
            n_args < static_cast<size_t>(op->n_in))
            return false;
        /* Keywords (attributes, timeout, seed): the Python kernel's. */
        for (size_t i = op->n_in; i < n_args; i++)
            if (!args[i].isNone())
                return false;
        if (grad && !op->backward)
            return false;
        std::string key;
        for (int i = 0; i < op->n_in; i++) {
            if (!args[i].isTensor() || !pack(args[i].toTensor(), &in[i]) ||
                (grad && !is_float(in[i].dtype)))
                return false;
            const mxop_array_t &r = in[i];
            key.append(reinterpret_cast<const char *>(&r.dtype), sizeof r.dtype);
            key.append(reinterpret_cast<const char *>(&r.ndim), sizeof r.ndim);
            key.append(reinterpret_cast<const char *>(r.shape), sizeof(int64_t) * r.ndim);
        }
        auto sp = op->specs.find(key);
        if (sp == op->specs.end())
            return false;
        specs = sp->second;
        for (const Spec &p : specs)
            if (grad && !is_float(p.dtype))
                return false;
        wpid = c->wpid;
        c->live += static_cast<long>(specs.size()); /* the blocks below, made outside the lock */
    }
    int n_out = static_cast<int>(specs.size());
    int made = 0;
    bool ok = true;
    for (; made < n_out; made++) {
        const Spec &p = specs[made];
        if (fn_alloc(c->h, p.dtype, p.ndim, p.shape, &out[made]) < 0) {
            ok = false;
            break;
        }
    }
    if (!ok) {
        /* Nothing was sent: give the blocks back, and the call to Python. */
        for (int i = 0; i < made; i++)
            free_block(c, &out[i]);
        unreserve(c, n_out - made);
        return false;
    }
    inflight.store(wpid);
    calls_here.fetch_add(1, std::memory_order_relaxed);
    int rc = fn_forward(c->h, op->op, op->call, in, op->n_in, out, n_out);
    inflight.store(0);
    std::vector<at::Tensor> res;
    res.reserve(n_out);
    for (int i = 0; i < n_out; i++)
        res.push_back(wrap(c, out[i]));
    if (rc < 0) {
        res.clear(); /* the blocks go back */
        {
            std::lock_guard<std::mutex> g(mu);
            c->wpid = 0; /* the worker may be a new one */
        }
        torch::jit::drop(*s, n_args);
        raise_rc(name, rc);
    }
    if (used != nullptr)
        *used = op;
    torch::jit::drop(*s, n_args);
    for (auto &t : res)
        s->push_back(std::move(t));
    return true;
}

/* After the Python kernel ran a plain call: its outputs' dtypes and
 * shapes, the op's answer for this input signature from now on. */
void learn(const std::string &name, const std::string &key, size_t n_ret, torch::jit::Stack *s)
{
    auto rets = torch::jit::last(*s, n_ret);
    std::vector<Spec> specs;
    for (const auto &v : rets) {
        if (!v.isTensor())
            return;
        const at::Tensor &t = v.toTensor();
        if (!plain_tensor(t))
            return;
        int code = code_of(t.scalar_type());
        if (!t.device().is_cpu() || code < 0 || t.dim() > MXOP_MAX_DIMS || t.numel() == 0)
            return;
        Spec p{};
        p.dtype = code;
        p.ndim = static_cast<int32_t>(t.dim());
        for (int d = 0; d < p.ndim; d++)
            p.shape[d] = t.size(d);
        specs.push_back(p);
    }
    std::lock_guard<std::mutex> g(mu);
    auto it = ops.find(name);
    if (it != ops.end() && it->second->specs.size() < 4096)
        it->second->specs[key] = std::move(specs);
}

/* The signature key of the call on the stack ("" when it is not plain). */
std::string plain_key(size_t n_in, size_t n_args, const torch::jit::Stack &s)
{
    auto args = torch::jit::last(s, n_args);
    std::string key;
    for (size_t i = n_in; i < n_args; i++)
        if (!args[i].isNone())
            return "";
    for (size_t i = 0; i < n_in; i++) {
        if (!args[i].isTensor())
            return "";
        const at::Tensor &t = args[i].toTensor();
        if (!plain_tensor(t))
            return "";
        int32_t code = code_of(t.scalar_type()), nd = static_cast<int32_t>(t.dim());
        if (!t.device().is_cpu() || code < 0 || nd > MXOP_MAX_DIMS)
            return "";
        key.append(reinterpret_cast<const char *>(&code), sizeof code);
        key.append(reinterpret_cast<const char *>(&nd), sizeof nd);
        for (int d = 0; d < nd; d++) {
            int64_t v = t.size(d);
            key.append(reinterpret_cast<const char *>(&v), sizeof v);
        }
    }
    return key;
}

/* The backward of a call made here: mxop_backward with in = [output
 * gradients, inputs, outputs], as the Python autograd Function does, and
 * as it, once-differentiable: under create_graph the gradients hang from
 * an Error node, so that differentiating them again raises instead of
 * giving a silently wrong (zero) second derivative. */
struct Backward : torch::autograd::Node {
    std::string op_name;
    std::shared_ptr<Op> op;
    std::vector<torch::autograd::SavedVariable> inputs, outputs;

    std::string name() const override
    {
        return "MxopBackward";
    }
    void release_variables() override
    {
        inputs.clear();
        outputs.clear();
    }
    torch::autograd::variable_list apply(torch::autograd::variable_list &&grads) override
    {
        auto self = NODE_SELF();
        std::vector<at::Tensor> ins, outs, gs;
        for (auto &v : inputs)
            ins.push_back(v.unpack());
        for (auto &v : outputs)
            outs.push_back(v.unpack(self));
        for (size_t i = 0; i < grads.size(); i++)
            gs.push_back(grads[i].defined() ? grads[i].contiguous() : at::zeros_like(outs[i]));
        size_t n_in = ins.size(), n_all = gs.size() + n_in + outs.size();
        auto c = op->client;
        mxop_array_t in[MXOP_MAX_TENSORS], out[MXOP_MAX_TENSORS];
        bool needs[MXOP_MAX_TENSORS];
        bool closed = false;
        {
            std::lock_guard<std::mutex> g(mu);
            TORCH_CHECK(n_all <= MXOP_MAX_TENSORS, "mxop op '", op_name, "': too many tensors");
            if (c->h == nullptr || !c->usable || c->pid != getpid()) {
                closed = true;
            } else {
                size_t k = 0;
                for (auto *list : {&gs, &ins, &outs})
                    for (const at::Tensor &t : *list)
                        if (!pack(t.detach(), &in[k++]))
                            in[k - 1].region = UINT32_MAX; /* not plain: see below */
                c->live += static_cast<long>(n_in);
            }
        }
        if (closed)
            raise_rc(op_name, MXOP_EDISCONNECTED); /* the client is closed */
        int made = 0, rc = 0;
        for (size_t i = 0; i < n_all; i++)
            if (in[i].region == UINT32_MAX)
                rc = MXOP_EINVAL;
        for (; rc == 0 && made < static_cast<int>(n_in); made++) {
            const mxop_array_t &x = in[grads.size() + made];
            needs[made] = task_should_compute_output(made);
            rc = fn_alloc(c->h, x.dtype, x.ndim, x.shape, &out[made]);
            if (rc < 0)
                break;
            if (!needs[made])
                out[made].req = MXOP_REQ_NULL;
        }
        if (rc == 0)
            calls_here.fetch_add(1, std::memory_order_relaxed);
        if (rc == 0)
            rc = fn_backward(c->h, op->op, op->call, in, static_cast<int>(n_all), out,
                             static_cast<int>(n_in));
        torch::autograd::variable_list res(n_in);
        for (int i = 0; i < made; i++) {
            at::Tensor t = wrap(c, out[i]);
            if (rc == 0 && needs[i])
                res[i] = t;
        }
        unreserve(c, static_cast<long>(n_in) - made);
        if (rc < 0) {
            res.clear();
            raise_rc(op_name, rc);
        }
        if (c10::GradMode::is_enabled()) {
            auto err = make_node<torch::autograd::Error>(
                "mxop op '" + op_name +
                    "' is once-differentiable: its backward runs in the worker and cannot "
                    "itself be differentiated (double backward, e.g. a gradient penalty or "
                    "gradgradcheck, is not supported)",
                torch::autograd::collect_next_edges(grads, ins));
            for (auto &t : res)
                if (t.defined())
                    torch::autograd::set_history(t, err);
        }
        return res;
    }
};

/* CPU: the call here, else the shadow op's Python CPU kernel. */
struct CpuKernel : c10::OperatorKernel {
    std::string name;
    int n_in;
    c10::OperatorHandle shadow; /* mxop_py::<name>, defined before this kernel */
    explicit CpuKernel(std::string n, int k)
        : name(std::move(n)), n_in(k), shadow(handle("mxop_py::" + name))
    {
    }
    void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *s)
    {
        size_t n_args = op.schema().arguments().size();
        if (call_here(name, n_args, s))
            return;
        std::string key = plain_key(static_cast<size_t>(n_in), n_args, *s);
        shadow.redispatchBoxed(ks, s);
        if (!key.empty())
            learn(name, key, op.schema().returns().size(), s);
    }
};

/* Autograd: a call that builds a graph goes to the shadow op's Python
 * Autograd kernel (an autograd.Function around the op's backward); any
 * other goes below autograd, to the CPU kernel above (or Meta, CUDA). */
struct AutogradKernel : c10::OperatorKernel {
    std::string name;
    c10::OperatorHandle shadow;
    explicit AutogradKernel(std::string n) : name(std::move(n)), shadow(handle("mxop_py::" + name))
    {
    }
    void operator()(const c10::OperatorHandle &op, c10::DispatchKeySet ks, torch::jit::Stack *s)
    {
        size_t n_args = op.schema().arguments().size();
        bool grad = false;
        /* An input with a forward-mode tangent: the Python kernel refuses it
         * by name (mxop ops have no jvp; a result without a tangent would be
         * silently wrong). */
        for (const auto &v : torch::jit::last(*s, n_args))
            if (v.isTensor() && v.toTensor().defined() && v.toTensor()._fw_grad(0).defined()) {
                shadow.callBoxed(s);
                return;
            }
        if (c10::GradMode::is_enabled()) {
            for (const auto &v : torch::jit::last(*s, n_args)) {
                if (v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad())
                    grad = true;
                else if (v.isTensorList())
                    for (const at::Tensor &t : v.toTensorList().vec())
                        grad = grad || (t.defined() && t.requires_grad());
            }
        }
        if (grad) {
            std::vector<at::Tensor> ins;
            for (const auto &v : torch::jit::last(*s, n_args))
                if (v.isTensor())
                    ins.push_back(v.toTensor());
            std::shared_ptr<Op> used;
            if (call_here(name, n_args, s, true, &used)) {
                /* The call's outputs are on the stack: into the graph, with a
                 * node that runs the op's backward here too. */
                auto node = make_node<Backward>();
                node->op_name = name;
                node->op = used;
                node->set_next_edges(torch::autograd::collect_next_edges(ins));
                for (const at::Tensor &t : ins)
                    node->inputs.emplace_back(t, false);
                size_t n_ret = op.schema().returns().size();
                for (size_t i = s->size() - n_ret; i < s->size(); i++) {
                    at::Tensor t = (*s)[i].toTensor();
                    torch::autograd::set_history(t, node);
                    node->outputs.emplace_back(t, true);
                }
                return;
            }
            /* The Python Function's call; like the CPU kernel's, it teaches
             * this file the signature (a model may never call without grad). */
            std::string key = plain_key(ins.size(), n_args, *s);
            shadow.callBoxed(s);
            if (!key.empty())
                learn(name, key, op.schema().returns().size(), s);
            return;
        }
        at::AutoDispatchBelowADInplaceOrView below;
        op.redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, s);
    }
};

} // namespace

extern "C" {

/* The reason of the last failure of this thread. */
const char *mxop_torchops_error(void)
{
    return last_error.c_str();
}

/* libmxop's mxop_forward, mxop_backward, mxop_array_alloc, mxop_array_free
 * and mxop_close, as addresses; registers the kernel of mxop_py::_dtypes,
 * through which Python then names the dtypes (see learn_dtypes).  0, or -1
 * (see _error). */
int mxop_torchops_init(void *forward, void *backward, void *alloc, void *free_, void *close_)
{
    fn_forward = reinterpret_cast<call_fn>(forward);
    fn_backward = reinterpret_cast<call_fn>(backward);
    fn_alloc = reinterpret_cast<alloc_fn>(alloc);
    fn_free = reinterpret_cast<free_fn>(free_);
    fn_close = reinterpret_cast<close_fn>(close_);
    try {
        auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "mxop_py",
                                                    c10::DispatchKey::CPU, __FILE__, __LINE__);
        lib->impl("_dtypes", torch::CppFunction::makeFromBoxedFunction<&learn_dtypes>());
        std::lock_guard<std::mutex> g(mu);
        libs.push_back(std::move(lib));
        return 0;
    } catch (const std::exception &e) {
        last_error = e.what();
        return -1;
    }
}

/* Replaces libmxop's forward (the bench's stub); returns the previous one. */
void *mxop_torchops_set_forward(void *forward)
{
    void *old = reinterpret_cast<void *>(fn_forward);
    fn_forward = reinterpret_cast<call_fn>(forward);
    return old;
}

/* Replaces libmxop's backward (the bench's stub); returns the previous one. */
void *mxop_torchops_set_backward(void *backward)
{
    void *old = reinterpret_cast<void *>(fn_backward);
    fn_backward = reinterpret_cast<call_fn>(backward);
    return old;
}

/* Registers the CPU and Autograd kernels of mxop::<name> (defined, with
 * its shadow mxop_py::<name>, by Python).  0, or -1 (see _error). */
int mxop_torchops_register(const char *name, int n_in)
{
    try {
        std::string n(name);
        auto cpu = std::make_unique<torch::Library>(torch::Library::IMPL, "mxop",
                                                    c10::DispatchKey::CPU, __FILE__, __LINE__);
        cpu->impl(n.c_str(),
                  torch::CppFunction::makeFromBoxedFunctor(std::make_unique<CpuKernel>(n, n_in)));
        auto ag = std::make_unique<torch::Library>(torch::Library::IMPL, "mxop",
                                                   c10::DispatchKey::Autograd, __FILE__, __LINE__);
        ag->impl(n.c_str(),
                 torch::CppFunction::makeFromBoxedFunctor(std::make_unique<AutogradKernel>(n)));
        std::lock_guard<std::mutex> g(mu);
        libs.push_back(std::move(cpu));
        libs.push_back(std::move(ag));
        return 0;
    } catch (const std::exception &e) {
        last_error = e.what();
        return -1;
    }
}

/* Points mxop::<name> at an op of session h (its call without keywords);
 * flags: 1 the op is fast (see Op), 2 it has a backward. */
void mxop_torchops_bind(const char *name, void *h, const void *op, const void *call, int fast,
                        int n_in, int n_out)
{
    std::lock_guard<std::mutex> g(mu);
    auto &c = clients[h];
    if (!c || c->released || c->pid != getpid()) {
        c = std::make_shared<Client>(); /* a new session at a reused address */
        c->h = static_cast<mxop_client_t *>(h);
        c->pid = getpid();
    }
    auto o = std::make_shared<Op>();
    o->client = c;
    o->op = static_cast<const mxop_op_t *>(op);
    o->call = static_cast<const mxop_call_t *>(call);
    o->fast = (fast & 1) != 0;
    o->backward = (fast & 2) != 0;
    o->n_in = n_in;
    o->n_out = n_out;
    ops[name] = o;
}

/* Session h's worker pid (0: unknown; -1: not to be signalled). */
void mxop_torchops_wpid(void *h, long pid)
{
    std::lock_guard<std::mutex> g(mu);
    auto it = clients.find(h);
    if (it != clients.end() && !it->second->released)
        it->second->wpid = pid;
}

/* Python began to close session h: no more calls here. */
void mxop_torchops_closing(void *h)
{
    std::lock_guard<std::mutex> g(mu);
    auto it = clients.find(h);
    if (it != clients.end())
        it->second->usable = false;
}

/* Python lets go of session h: 1 if blocks made here still use it (the
 * last of them closes it), 0 if the caller closes it now. */
int mxop_torchops_release(void *h)
{
    std::lock_guard<std::mutex> g(mu);
    auto it = clients.find(h);
    if (it == clients.end())
        return 0;
    auto c = it->second;
    clients.erase(it);
    c->usable = false;
    c->released = true;
    if (c->live > 0)
        return 1;
    c->h = nullptr;
    return 0;
}

/* Turns the calls made here on (1) or off (0: all go to the Python
 * kernels); returns the previous setting. */
int mxop_torchops_enable(int on)
{
    return enabled.exchange(on != 0) ? 1 : 0;
}

/* The number of calls made here so far. */
long mxop_torchops_calls(void)
{
    return calls_here.load();
}

/* The worker pid of the call in flight here (0: none). */
long mxop_torchops_inflight(void)
{
    return inflight.load();
}

} // extern "C"
