/*
 * mxop/op.hpp - a C++17 layer over the plugin ABI (op.h), header-only.
 *
 * Nothing here changes the ABI: a C++ op library is still a plugin that
 * exports mxop_plugin_info and mxop_plugin_init, built with one line:
 *
 *     c++ -std=c++17 -shared -fPIC -O3 $(pkg-config --cflags mxop-plugin) myops.cpp -o myops.so
 *
 * What it adds:
 *   - typed tensor views: mxop::View<float> checks the dtype once and
 *     indexes by flat position or by coordinates through the strides;
 *   - registration from lambdas, functors or classes (mxop::OpDef);
 *   - C++ exceptions turned into set_error: mxop::Error keeps its code, any
 *     other std::exception becomes MXOP_EOP_FAILED with its what(), anything
 *     else a fixed message.  No exception ever crosses into the worker.
 *
 * A library may register up to MXOP_CPP_MAX_OPS ops through OpDef (every
 * registered op takes one slot of trampolines, made at compile time).
 */
#ifndef MXOP_OP_HPP
#define MXOP_OP_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "op.h"

#ifndef MXOP_CPP_MAX_OPS
#define MXOP_CPP_MAX_OPS 32
#endif

namespace mxop {

/** The host table, set by OpDef::add (or by hand with set_host). */
inline const mxop_host_t *&host_slot()
{
    static const mxop_host_t *h = nullptr;
    return h;
}
inline void set_host(const mxop_host_t *h) { host_slot() = h; }
inline const mxop_host_t &host() { return *host_slot(); }

/** An error with an mxop code; thrown from an op, it becomes set_error(code, what). */
class Error : public std::exception {
public:
    Error(int code, std::string msg) : code_(code), msg_(std::move(msg)) {}
    int code() const noexcept { return code_; }
    const char *what() const noexcept override { return msg_.c_str(); }

private:
    int code_;
    std::string msg_;
};

/** The dtype number of a C++ element type. */
template <typename T> struct dtype_of;
template <> struct dtype_of<float> : std::integral_constant<int32_t, MXOP_F32> {};
template <> struct dtype_of<double> : std::integral_constant<int32_t, MXOP_F64> {};
template <> struct dtype_of<int32_t> : std::integral_constant<int32_t, MXOP_I32> {};
template <> struct dtype_of<int64_t> : std::integral_constant<int32_t, MXOP_I64> {};
template <> struct dtype_of<uint8_t> : std::integral_constant<int32_t, MXOP_U8> {};
template <> struct dtype_of<int8_t> : std::integral_constant<int32_t, MXOP_I8> {};

/**
 * A typed view of a tensor: View<float> x(in[0], "x") throws MXOP_EDTYPE
 * when in[0] is not f32.  Indexing by flat position assumes a contiguous
 * tensor (the case unless the op sets MXOP_OP_STRIDED); at(i, j, ...) uses
 * the strides and works for any tensor.
 */
template <typename T> class View {
public:
    using elem = std::remove_const_t<T>;

    View(const mxop_tensor_t &t, const char *what = "tensor") : t_(&t)
    {
        if (t.dtype != dtype_of<elem>::value)
            throw Error(MXOP_EDTYPE, std::string(what) + " is " + mxop_dtype_name(t.dtype) +
                                         ", expected " + mxop_dtype_name(dtype_of<elem>::value));
    }

    T *data() const { return static_cast<T *>(t_->data); }
    size_t size() const { return t_->size; }
    int ndim() const { return t_->ndim; }
    int64_t shape(int d) const { return t_->shape[d]; }
    int64_t stride(int d) const { return t_->strides[d]; }
    T &operator[](size_t i) const { return data()[i]; }
    T *begin() const { return data(); }
    T *end() const { return data() + size(); }

    template <typename... I> T &at(I... idx) const
    {
        static_assert(sizeof...(I) >= 1, "at() needs coordinates");
        const int64_t c[] = {static_cast<int64_t>(idx)...};
        int64_t off = 0;
        for (size_t d = 0; d < sizeof...(I); d++)
            off += c[d] * t_->strides[d];
        return data()[off];
    }

private:
    const mxop_tensor_t *t_;
};

/** A call's tensors: in[i], out[i], n. */
template <typename TensorT> struct Tensors {
    int n;
    TensorT *t;
    TensorT &operator[](int i) const { return t[i]; }
    int size() const { return n; }
};
using Inputs = Tensors<const mxop_tensor_t>;
using Outputs = Tensors<mxop_tensor_t>;

/** The call context with throwing, typed attribute readers. */
class Ctx {
public:
    explicit Ctx(mxop_ctx_t *c) : c_(c) {}
    mxop_ctx_t *raw() const { return c_; }

    int64_t attr_int(const char *key, int64_t dflt = 0) const
    {
        int64_t v = 0;
        check(host().attr_int(c_, key, dflt, &v));
        return v;
    }
    double attr_float(const char *key, double dflt = 0.0) const
    {
        double v = 0;
        check(host().attr_float(c_, key, dflt, &v));
        return v;
    }
    bool attr_bool(const char *key, bool dflt = false) const
    {
        int v = 0;
        check(host().attr_bool(c_, key, dflt ? 1 : 0, &v));
        return v != 0;
    }
    std::string attr_string(const char *key, const char *dflt = "") const
    {
        const char *v = MXOP_HOST_HAS(&host(), attr_string) ? host().attr_string(c_, key, dflt)
                                                            : host().attr_get(c_, key);
        return v != nullptr ? v : dflt;
    }
    /** Temporary memory for this call; throws MXOP_ENOMEM when there is none. */
    void *workspace(size_t bytes) const
    {
        void *p = host().workspace(c_, bytes);
        if (p == nullptr)
            throw Error(MXOP_ENOMEM, "no workspace of " + std::to_string(bytes) + " bytes");
        return p;
    }

private:
    /* A reader's failure already recorded its message: keep it, pass the code on. */
    struct Recorded : Error {
        explicit Recorded(int code) : Error(code, "") {}
    };
    static void check(int rc)
    {
        if (rc != 0)
            throw Recorded(rc);
    }
    template <size_t N> friend struct Slot;
    friend int guard_code(mxop_ctx_t *, const std::function<void()> &) noexcept;
    friend class OpDef;
    mxop_ctx_t *c_;
};

/**
 * Runs f, turning any exception into set_error; returns 0 or the code.
 * Nothing escapes: the worker is C.
 */
inline int guard_code(mxop_ctx_t *ctx, const std::function<void()> &f) noexcept
{
    try {
        f();
        return 0;
    } catch (const Ctx::Recorded &e) {
        return e.code();
    } catch (const Error &e) {
        return host().set_error(ctx, e.code() < 0 ? e.code() : MXOP_EOP_FAILED, "%s", e.what());
    } catch (const std::exception &e) {
        return host().set_error(ctx, MXOP_EOP_FAILED, "C++ exception: %s", e.what());
    } catch (...) {
        return host().set_error(ctx, MXOP_EOP_FAILED, "C++ exception of an unknown type");
    }
}

using ComputeFn = std::function<void(Ctx &, Inputs, Outputs)>;
using ShapeFn = std::function<void(Ctx &, int, const mxop_shape_t *, int, mxop_shape_t *)>;
using TypeFn = std::function<void(Ctx &, int, const int32_t *, int, int32_t *)>;
using CheckFn = std::function<void(Ctx &)>;

/* One op's callbacks, reached from C through the slot's trampolines. */
struct Callbacks {
    CheckFn check;
    ShapeFn shape;
    TypeFn type;
    ComputeFn forward, backward;
};

inline std::vector<Callbacks> &slots()
{
    static std::vector<Callbacks> s(MXOP_CPP_MAX_OPS);
    return s;
}

template <size_t N> struct Slot {
    static int check(mxop_ctx_t *c)
    {
        return guard_code(c, [&] {
            Ctx x(c);
            slots()[N].check(x);
        });
    }
    static int shape(mxop_ctx_t *c, int n_in, const mxop_shape_t *in, int n_out, mxop_shape_t *out)
    {
        return guard_code(c, [&] {
            Ctx x(c);
            slots()[N].shape(x, n_in, in, n_out, out);
        });
    }
    static int type(mxop_ctx_t *c, int n_in, const int32_t *in, int n_out, int32_t *out)
    {
        return guard_code(c, [&] {
            Ctx x(c);
            slots()[N].type(x, n_in, in, n_out, out);
        });
    }
    static int forward(mxop_ctx_t *c, int n_in, const mxop_tensor_t *in, int n_out,
                       mxop_tensor_t *out)
    {
        return guard_code(c, [&] {
            Ctx x(c);
            slots()[N].forward(x, Inputs{n_in, in}, Outputs{n_out, out});
        });
    }
    static int backward(mxop_ctx_t *c, int n_in, const mxop_tensor_t *in, int n_out,
                        mxop_tensor_t *out)
    {
        return guard_code(c, [&] {
            Ctx x(c);
            slots()[N].backward(x, Inputs{n_in, in}, Outputs{n_out, out});
        });
    }
};

/* The trampolines of every slot, as C function pointers. */
struct SlotFns {
    int (*check)(mxop_ctx_t *);
    int (*shape)(mxop_ctx_t *, int, const mxop_shape_t *, int, mxop_shape_t *);
    int (*type)(mxop_ctx_t *, int, const int32_t *, int, int32_t *);
    int (*forward)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
    int (*backward)(mxop_ctx_t *, int, const mxop_tensor_t *, int, mxop_tensor_t *);
};

template <size_t... N> inline const SlotFns *slot_table(std::index_sequence<N...>)
{
    static const SlotFns t[] = {
        {&Slot<N>::check, &Slot<N>::shape, &Slot<N>::type, &Slot<N>::forward, &Slot<N>::backward}...};
    return t;
}

inline size_t &slots_used()
{
    static size_t n = 0;
    return n;
}

/* Detection of a class's optional members, for OpDef::from<T>(). */
template <typename T, typename = void> struct has_backward : std::false_type {};
template <typename T>
struct has_backward<T, std::void_t<decltype(std::declval<T &>().backward(
                           std::declval<Ctx &>(), std::declval<Inputs>(), std::declval<Outputs>()))>>
    : std::true_type {};
template <typename T, typename = void> struct has_infer_shape : std::false_type {};
template <typename T>
struct has_infer_shape<T, std::void_t<decltype(std::declval<T &>().infer_shape(
                              std::declval<Ctx &>(), 0, std::declval<const mxop_shape_t *>(), 0,
                              std::declval<mxop_shape_t *>()))>> : std::true_type {};
template <typename T, typename = void> struct has_infer_type : std::false_type {};
template <typename T>
struct has_infer_type<T, std::void_t<decltype(std::declval<T &>().infer_type(
                             std::declval<Ctx &>(), 0, std::declval<const int32_t *>(), 0,
                             std::declval<int32_t *>()))>> : std::true_type {};

/**
 * An op under construction:
 *
 *     mxop::OpDef("scale").inputs(1).outputs(1)
 *         .attr("alpha", MXOP_ATTR_FLOAT, "1.0", "the factor")
 *         .forward([](mxop::Ctx &ctx, mxop::Inputs in, mxop::Outputs out) { ... })
 *         .add(ctx, host);
 *
 * add() registers it and returns register_op's code (it never throws).
 */
class OpDef {
public:
    explicit OpDef(std::string name) : name_(std::move(name)) {}

    OpDef &description(std::string d) { desc_ = std::move(d); return *this; }
    OpDef &inputs(int n, int min = 0) { n_in_ = n; min_in_ = min; return *this; }
    OpDef &outputs(int n) { n_out_ = n; return *this; }
    OpDef &flags(uint32_t f) { flags_ = f; return *this; }
    OpDef &mutates(uint64_t mask) { mutated_ = mask; return *this; }
    OpDef &attr(std::string name, int32_t type, const char *dflt, std::string doc,
                bool required = false)
    {
        attrs_.push_back({std::move(name), type, required, dflt != nullptr,
                          dflt != nullptr ? dflt : "", std::move(doc)});
        return *this;
    }
    OpDef &check_attrs(CheckFn f) { cb_.check = std::move(f); return *this; }
    OpDef &infer_shape(ShapeFn f) { cb_.shape = std::move(f); return *this; }
    OpDef &infer_type(TypeFn f) { cb_.type = std::move(f); return *this; }
    OpDef &forward(ComputeFn f) { cb_.forward = std::move(f); return *this; }
    OpDef &backward(ComputeFn f) { cb_.backward = std::move(f); return *this; }

    /**
     * The callbacks of a class T: forward (required), backward,
     * infer_shape, infer_type (each used when T has it).  One instance is
     * made, and lives as long as the library.
     */
    template <typename T, typename... Args> OpDef &from(Args &&...args)
    {
        auto obj = std::make_shared<T>(std::forward<Args>(args)...);
        cb_.forward = [obj](Ctx &c, Inputs i, Outputs o) { obj->forward(c, i, o); };
        if constexpr (has_backward<T>::value)
            cb_.backward = [obj](Ctx &c, Inputs i, Outputs o) { obj->backward(c, i, o); };
        if constexpr (has_infer_shape<T>::value)
            cb_.shape = [obj](Ctx &c, int ni, const mxop_shape_t *i, int no, mxop_shape_t *o) {
                obj->infer_shape(c, ni, i, no, o);
            };
        if constexpr (has_infer_type<T>::value)
            cb_.type = [obj](Ctx &c, int ni, const int32_t *i, int no, int32_t *o) {
                obj->infer_type(c, ni, i, no, o);
            };
        return *this;
    }

    int add(mxop_ctx_t *ctx, const mxop_host_t *h) noexcept
    {
        set_host(h);
        if (slots_used() >= MXOP_CPP_MAX_OPS)
            return h->set_error(ctx, MXOP_ELIMIT,
                                "op '%s': more than MXOP_CPP_MAX_OPS (%d) C++ ops in one library",
                                name_.c_str(), MXOP_CPP_MAX_OPS);
        size_t n = slots_used();
        const SlotFns &fns = slot_table(std::make_index_sequence<MXOP_CPP_MAX_OPS>())[n];
        try {
            slots()[n] = cb_;
        } catch (...) {
            return h->set_error(ctx, MXOP_ENOMEM, "op '%s': out of memory", name_.c_str());
        }
        std::vector<mxop_attr_decl_t> decls;
        try {
            for (const auto &a : attrs_)
                decls.push_back({a.name.c_str(), a.type, a.required ? 1 : 0,
                                 a.has_default ? a.dflt.c_str() : nullptr, a.doc.c_str()});
        } catch (...) {
            return h->set_error(ctx, MXOP_ENOMEM, "op '%s': out of memory", name_.c_str());
        }
        mxop_op_def_t def{};
        def.struct_size = sizeof(def);
        def.name = name_.c_str();
        def.description = desc_.c_str();
        def.num_inputs = n_in_;
        def.min_inputs = min_in_;
        def.num_outputs = n_out_;
        def.flags = flags_;
        def.mutated_inputs = mutated_;
        def.check_attrs = cb_.check ? fns.check : nullptr;
        def.infer_shape = cb_.shape ? fns.shape : nullptr;
        def.infer_type = cb_.type ? fns.type : nullptr;
        def.forward = cb_.forward ? fns.forward : nullptr;
        def.backward = cb_.backward ? fns.backward : nullptr;
        def.attrs = decls.empty() ? nullptr : decls.data();
        def.num_attrs = static_cast<int32_t>(decls.size());
        int rc = h->register_op(ctx, &def); /* the worker copies every string */
        if (rc == 0)
            slots_used()++;
        return rc;
    }

private:
    struct AttrSpec {
        std::string name;
        int32_t type;
        bool required;
        bool has_default;
        std::string dflt;
        std::string doc;
    };
    std::string name_, desc_;
    int n_in_ = 1, min_in_ = 0, n_out_ = 1;
    uint32_t flags_ = 0;
    uint64_t mutated_ = 0;
    std::vector<AttrSpec> attrs_;
    Callbacks cb_;
};

} // namespace mxop

#endif /* MXOP_OP_HPP */
