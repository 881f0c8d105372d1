/*
 * common/abi_layout.h - the layout of every public struct, as numbers.
 *
 * The plugin ABI (op.h) and the engine API (client.h) promise that structs
 * only grow at the end.  These tables write down what each struct is on an
 * LP64 target (size, alignment, every member's offset), and
 * common/abi_layout.c (C) and common/abi_layout_hpp.cc (C++, through
 * op.hpp) assert them at compile time: a member inserted, moved, retyped or
 * removed stops the build instead of silently breaking every library and
 * engine built before.  Appending a member means appending a row here (and
 * the struct's new size): the rows of older members never change.
 *
 * X(type, sizeof, alignof) and F(type, member, offsetof).
 */
#ifndef MXOP_COMMON_ABI_LAYOUT_H
#define MXOP_COMMON_ABI_LAYOUT_H

#define MXOP__ABI_SIZES(X)                                                                         \
    X(mxop_shape_t, 72, 8)                                                                         \
    X(mxop_tensor_t, 160, 8)                                                                       \
    X(mxop_attr_decl_t, 32, 8)                                                                     \
    X(mxop_op_def_t, 176, 8)                                                                       \
    X(mxop_host_t, 248, 8)                                                                         \
    X(mxop_plugin_info_t, 32, 8)                                                                   \
    X(mxop_connect_opts_t, 40, 8)                                                                  \
    X(mxop_op_info_t, 56, 8)                                                                       \
    X(mxop_op_info_v2_t, 72, 8)                                                                    \
    X(mxop_attr_info_t, 40, 8)                                                                     \
    X(mxop_array_t, 112, 8)                                                                        \
    X(mxop_call_t, 56, 8)                                                                          \
    X(mxop_stats_t, 56, 8)                                                                         \
    X(mxop_stats_v2_t, 80, 8)                                                                      \
    X(mxop_shared_stats_v2_t, 72, 8)

#define MXOP__ABI_OFFSETS(F)                                                                       \
    F(mxop_shape_t, ndim, 0)                                                                       \
    F(mxop_shape_t, dims, 8)                                                                       \
    F(mxop_tensor_t, data, 0)                                                                      \
    F(mxop_tensor_t, dtype, 8)                                                                     \
    F(mxop_tensor_t, ndim, 12)                                                                     \
    F(mxop_tensor_t, shape, 16)                                                                    \
    F(mxop_tensor_t, strides, 80)                                                                  \
    F(mxop_tensor_t, req, 144)                                                                     \
    F(mxop_tensor_t, device, 148)                                                                  \
    F(mxop_tensor_t, size, 152)                                                                    \
    F(mxop_attr_decl_t, name, 0)                                                                   \
    F(mxop_attr_decl_t, type, 8)                                                                   \
    F(mxop_attr_decl_t, required, 12)                                                              \
    F(mxop_attr_decl_t, default_value, 16)                                                         \
    F(mxop_attr_decl_t, doc, 24)                                                                   \
    F(mxop_op_def_t, struct_size, 0)                                                               \
    F(mxop_op_def_t, name, 8)                                                                      \
    F(mxop_op_def_t, description, 16)                                                              \
    F(mxop_op_def_t, num_inputs, 24)                                                               \
    F(mxop_op_def_t, min_inputs, 28)                                                               \
    F(mxop_op_def_t, num_outputs, 32)                                                              \
    F(mxop_op_def_t, flags, 36)                                                                    \
    F(mxop_op_def_t, mutated_inputs, 40)                                                           \
    F(mxop_op_def_t, check_attrs, 48)                                                              \
    F(mxop_op_def_t, infer_shape, 56)                                                              \
    F(mxop_op_def_t, infer_type, 64)                                                               \
    F(mxop_op_def_t, forward, 72)                                                                  \
    F(mxop_op_def_t, backward, 80)                                                                 \
    F(mxop_op_def_t, state_create, 88)                                                             \
    F(mxop_op_def_t, state_forward, 96)                                                            \
    F(mxop_op_def_t, state_backward, 104)                                                          \
    F(mxop_op_def_t, state_destroy, 112)                                                           \
    F(mxop_op_def_t, forward_gpu, 120)                                                             \
    F(mxop_op_def_t, backward_gpu, 128)                                                            \
    F(mxop_op_def_t, state_forward_gpu, 136)                                                       \
    F(mxop_op_def_t, state_backward_gpu, 144)                                                      \
    F(mxop_op_def_t, attrs, 152)                                                                   \
    F(mxop_op_def_t, num_attrs, 160)                                                               \
    F(mxop_op_def_t, dynamic_outputs, 168)                                                         \
    F(mxop_host_t, struct_size, 0)                                                                 \
    F(mxop_host_t, abi_version, 4)                                                                 \
    F(mxop_host_t, register_op, 8)                                                                 \
    F(mxop_host_t, set_error, 16)                                                                  \
    F(mxop_host_t, attr_get, 24)                                                                   \
    F(mxop_host_t, attr_count, 32)                                                                 \
    F(mxop_host_t, attr_key, 40)                                                                   \
    F(mxop_host_t, attr_value, 48)                                                                 \
    F(mxop_host_t, attr_int, 56)                                                                   \
    F(mxop_host_t, attr_float, 64)                                                                 \
    F(mxop_host_t, attr_bool, 72)                                                                  \
    F(mxop_host_t, workspace, 80)                                                                  \
    F(mxop_host_t, rng_u64, 88)                                                                    \
    F(mxop_host_t, rng_uniform, 96)                                                                \
    F(mxop_host_t, rng_normal, 104)                                                                \
    F(mxop_host_t, cuda_stream, 112)                                                               \
    F(mxop_host_t, gemm, 120)                                                                      \
    F(mxop_host_t, add, 128)                                                                       \
    F(mxop_host_t, mul, 136)                                                                       \
    F(mxop_host_t, axpy, 144)                                                                      \
    F(mxop_host_t, fill, 152)                                                                      \
    F(mxop_host_t, copy, 160)                                                                      \
    F(mxop_host_t, sum, 168)                                                                       \
    F(mxop_host_t, gpu_workspace, 176)                                                             \
    F(mxop_host_t, gpu_gemm, 184)                                                                  \
    F(mxop_host_t, rng_seed, 192)                                                                  \
    F(mxop_host_t, attr_string, 200)                                                               \
    F(mxop_host_t, attr_int_list, 208)                                                             \
    F(mxop_host_t, attr_float_list, 216)                                                           \
    F(mxop_host_t, convert, 224)                                                                   \
    F(mxop_host_t, alloc_output, 232)                                                              \
    F(mxop_host_t, tensor_size, 240)                                                               \
    F(mxop_plugin_info_t, struct_size, 0)                                                          \
    F(mxop_plugin_info_t, abi_version, 4)                                                          \
    F(mxop_plugin_info_t, name, 8)                                                                 \
    F(mxop_plugin_info_t, version, 16)                                                             \
    F(mxop_plugin_info_t, abi_required, 24)                                                        \
    F(mxop_plugin_info_t, tensor_size, 28)                                                         \
    F(mxop_connect_opts_t, struct_size, 0)                                                         \
    F(mxop_connect_opts_t, timeout_ms, 4)                                                          \
    F(mxop_connect_opts_t, connect_timeout_ms, 8)                                                  \
    F(mxop_connect_opts_t, client_name, 16)                                                        \
    F(mxop_connect_opts_t, data_path, 24)                                                          \
    F(mxop_connect_opts_t, max_sessions, 28)                                                       \
    F(mxop_connect_opts_t, reconnect, 32)                                                          \
    F(mxop_op_info_t, name, 0)                                                                     \
    F(mxop_op_info_t, description, 8)                                                              \
    F(mxop_op_info_t, library, 16)                                                                 \
    F(mxop_op_info_t, num_inputs, 24)                                                              \
    F(mxop_op_info_t, min_inputs, 28)                                                              \
    F(mxop_op_info_t, num_outputs, 32)                                                             \
    F(mxop_op_info_t, mutated_inputs, 40)                                                          \
    F(mxop_op_info_t, has_backward, 48)                                                            \
    F(mxop_op_info_t, stateful, 52)                                                                \
    F(mxop_op_info_v2_t, struct_size, 0)                                                           \
    F(mxop_op_info_v2_t, num_inputs, 4)                                                            \
    F(mxop_op_info_v2_t, min_inputs, 8)                                                            \
    F(mxop_op_info_v2_t, num_outputs, 12)                                                          \
    F(mxop_op_info_v2_t, name, 16)                                                                 \
    F(mxop_op_info_v2_t, description, 24)                                                          \
    F(mxop_op_info_v2_t, library, 32)                                                              \
    F(mxop_op_info_v2_t, mutated_inputs, 40)                                                       \
    F(mxop_op_info_v2_t, has_backward, 48)                                                         \
    F(mxop_op_info_v2_t, stateful, 52)                                                             \
    F(mxop_op_info_v2_t, flags, 56)                                                                \
    F(mxop_op_info_v2_t, num_attrs, 60)                                                            \
    F(mxop_op_info_v2_t, dynamic_outputs, 64)                                                      \
    F(mxop_attr_info_t, struct_size, 0)                                                            \
    F(mxop_attr_info_t, type, 4)                                                                   \
    F(mxop_attr_info_t, name, 8)                                                                   \
    F(mxop_attr_info_t, required, 16)                                                              \
    F(mxop_attr_info_t, default_value, 24)                                                         \
    F(mxop_attr_info_t, doc, 32)                                                                   \
    F(mxop_array_t, data, 0)                                                                       \
    F(mxop_array_t, dtype, 8)                                                                      \
    F(mxop_array_t, ndim, 12)                                                                      \
    F(mxop_array_t, shape, 16)                                                                     \
    F(mxop_array_t, region, 80)                                                                    \
    F(mxop_array_t, offset, 88)                                                                    \
    F(mxop_array_t, nbytes, 96)                                                                    \
    F(mxop_array_t, req, 104)                                                                      \
    F(mxop_call_t, struct_size, 0)                                                                 \
    F(mxop_call_t, attrs, 8)                                                                       \
    F(mxop_call_t, state, 16)                                                                      \
    F(mxop_call_t, timeout_ms, 24)                                                                 \
    F(mxop_call_t, seed, 32)                                                                       \
    F(mxop_call_t, in_strides, 40)                                                                 \
    F(mxop_call_t, out_strides, 48)                                                                \
    F(mxop_stats_t, calls, 0)                                                                      \
    F(mxop_stats_t, errors, 8)                                                                     \
    F(mxop_stats_t, worker_restarts, 16)                                                           \
    F(mxop_stats_t, staged_bytes, 24)                                                              \
    F(mxop_stats_t, regions, 32)                                                                   \
    F(mxop_stats_t, region_bytes, 40)                                                              \
    F(mxop_stats_t, worker_pid, 48)                                                                \
    F(mxop_stats_t, daemon_sessions, 52)                                                           \
    F(mxop_stats_v2_t, struct_size, 0)                                                             \
    F(mxop_stats_v2_t, worker_pid, 4)                                                              \
    F(mxop_stats_v2_t, daemon_sessions, 8)                                                         \
    F(mxop_stats_v2_t, calls, 16)                                                                  \
    F(mxop_stats_v2_t, errors, 24)                                                                 \
    F(mxop_stats_v2_t, worker_restarts, 32)                                                        \
    F(mxop_stats_v2_t, staged_bytes, 40)                                                           \
    F(mxop_stats_v2_t, regions, 48)                                                                \
    F(mxop_stats_v2_t, region_bytes, 56)                                                           \
    F(mxop_stats_v2_t, scratch_bytes, 64)                                                          \
    F(mxop_stats_v2_t, confined, 72)                                                               \
    F(mxop_shared_stats_v2_t, struct_size, 0)                                                      \
    F(mxop_shared_stats_v2_t, blocks_live, 8)                                                      \
    F(mxop_shared_stats_v2_t, bytes_live, 16)                                                      \
    F(mxop_shared_stats_v2_t, blocks_cached, 24)                                                   \
    F(mxop_shared_stats_v2_t, bytes_cached, 32)                                                    \
    F(mxop_shared_stats_v2_t, registrations, 40)                                                   \
    F(mxop_shared_stats_v2_t, revocations, 48)                                                     \
    F(mxop_shared_stats_v2_t, reused_warm, 56)                                                     \
    F(mxop_shared_stats_v2_t, outputs, 64)

#endif /* MXOP_COMMON_ABI_LAYOUT_H */
