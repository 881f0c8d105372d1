/*
 * tests/test_frame.c - unit tests of the frame codec, the protobuf arena and
 * the descriptor checks (no daemon needed).
 */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "data.pb-c.h"
#include "mxop/client.h"
#include "wire/frame.h"
#include "shm/desc.h"
#include "shm/region.h"

Test(frame, header_round_trip, .timeout = 10)
{
    uint8_t h[MXOP__FRAME_HDR];
    mxop__frame_hdr_encode(h, MXOP__KIND_CALL, 1234);
    uint16_t kind;
    uint32_t len;
    cr_assert_eq(mxop__frame_hdr_decode(h, &kind, &len), 0);
    cr_assert_eq(kind, MXOP__KIND_CALL);
    cr_assert_eq(len, 1234);
}

Test(frame, header_errors_are_named, .timeout = 10)
{
    uint8_t h[MXOP__FRAME_HDR];
    uint16_t kind;
    uint32_t len;
    mxop__frame_hdr_encode(h, MXOP__KIND_CALL, MXOP__FRAME_MAX + 1);
    cr_assert_eq(mxop__frame_hdr_decode(h, &kind, &len), MXOP_EFRAME_TOO_LARGE);
    mxop__frame_hdr_encode(h, 99, 1);
    cr_assert_eq(mxop__frame_hdr_decode(h, &kind, &len), MXOP_EPROTOCOL);
    mxop__frame_hdr_encode(h, MXOP__KIND_CALL, 1);
    h[4] = 2;
    cr_assert_eq(mxop__frame_hdr_decode(h, &kind, &len), MXOP_EVERSION);
    h[4] = 1;
    h[0] ^= 0xff;
    cr_assert_eq(mxop__frame_hdr_decode(h, &kind, &len), MXOP_EPROTOCOL);
}

Test(frame, send_and_receive_with_descriptor, .timeout = 10)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int memfd;
    cr_assert_eq(mxop__region_create_fd("t", 4096, &memfd), 0);

    Mxop__StateDestroy sd = MXOP__STATE_DESTROY__INIT;
    sd.state = 77;
    Mxop__Call call = MXOP__CALL__INIT;
    call.id = 5;
    call.body_case = MXOP__CALL__BODY_STATE_DESTROY;
    call.state_destroy = &sd;
    mxop__framebuf_t out = {0}, in = {0};
    cr_assert_eq(mxop__frame_send(sv[0], &out, MXOP__KIND_CALL, &call.base, &memfd, 1), 0);

    uint16_t kind;
    uint32_t len;
    int fds[2], nfds = 0;
    cr_assert_eq(mxop__frame_recv(sv[1], &in, &kind, &len, fds, 2, &nfds, 1000), 0);
    cr_assert_eq(kind, MXOP__KIND_CALL);
    cr_assert_eq(nfds, 1);
    mxop__pbarena_t arena;
    cr_assert_eq(mxop__pbarena_init(&arena, 4096), 0);
    Mxop__Call *got = mxop__call__unpack(&arena.allocator, len, in.data);
    cr_assert_not_null(got);
    cr_assert_eq(got->id, 5);
    cr_assert_eq(got->state_destroy->state, 77);
    mxop__pbarena_reset(&arena);
    mxop__pbarena_destroy(&arena);

    /* Nothing more comes: the receive times out instead of blocking. */
    cr_assert_eq(mxop__frame_recv(sv[1], &in, &kind, &len, NULL, 0, NULL, 50), MXOP_ETIMEOUT);
    close(sv[0]);
    cr_assert_eq(mxop__frame_recv(sv[1], &in, &kind, &len, NULL, 0, NULL, 1000),
                 MXOP_EDISCONNECTED);
    close(fds[0]);
    close(memfd);
    close(sv[1]);
    mxop__framebuf_free(&out);
    mxop__framebuf_free(&in);
}

Test(frame, descriptor_spans_and_bounds, .timeout = 10)
{
    char err[128];
    uint64_t span, elems;
    int64_t shape[] = {4, 5};
    cr_assert_eq(mxop__desc_span(MXOP_F32, 2, shape, NULL, &span, &elems, err, sizeof(err)), 0);
    cr_assert_eq(span, 80);
    cr_assert_eq(elems, 20);
    int64_t strides[] = {10, 1};
    cr_assert_eq(mxop__desc_span(MXOP_F64, 2, shape, strides, &span, &elems, err, sizeof(err)), 0);
    cr_assert_eq(span, (3 * 10 + 4 + 1) * 8);
    int64_t huge[] = {1LL << 40, 1LL << 40};
    cr_assert_eq(mxop__desc_span(MXOP_F32, 2, huge, NULL, &span, &elems, err, sizeof(err)),
                 MXOP_EINVAL);
    int64_t neg[] = {-1};
    cr_assert_eq(mxop__desc_span(MXOP_F32, 1, neg, NULL, &span, &elems, err, sizeof(err)),
                 MXOP_EINVAL);
    cr_assert_eq(mxop__desc_span(42, 1, shape, NULL, &span, &elems, err, sizeof(err)), MXOP_EDTYPE);
    int64_t empty[] = {3, 0};
    cr_assert_eq(mxop__desc_span(MXOP_F32, 2, empty, NULL, &span, &elems, err, sizeof(err)), 0);
    cr_assert_eq(span, 0);

    cr_assert_eq(mxop__desc_check_bounds(0, 80, 4, 80, err, sizeof(err)), 0);
    cr_assert_eq(mxop__desc_check_bounds(4, 80, 4, 80, err, sizeof(err)), MXOP_EBOUNDS);
    cr_assert_eq(mxop__desc_check_bounds(2, 8, 4, 80, err, sizeof(err)), MXOP_EBOUNDS);
    cr_assert_eq(mxop__desc_check_bounds(UINT64_MAX - 3, 8, 1, 80, err, sizeof(err)), MXOP_EBOUNDS);
}

Test(frame, every_error_code_has_a_name_and_message, .timeout = 10)
{
#define XX(name, num, msg)                                                                         \
    cr_assert_str_eq(mxop_err_name(num), "MXOP_E" #name);                                          \
    cr_assert_str_eq(mxop_strerror(num), msg);
    MXOP_ERROR_MAP(XX)
#undef XX
    cr_assert_str_eq(mxop_err_name(12345), "MXOP_E?");
    cr_assert_str_eq(mxop_strerror(0), "success");
}

Test(frame, regions_are_sealed_against_shrinking, .timeout = 10)
{
    int fd;
    cr_assert_eq(mxop__region_create_fd("t", 1 << 16, &fd), 0);
    cr_assert_neq(ftruncate(fd, 4096), 0, "a region could be shrunk");
    char err[128];
    cr_assert_eq(mxop__region_check_fd(fd, 1 << 16, err, sizeof(err)), 0);
    cr_assert_eq(mxop__region_check_fd(fd, 1 << 17, err, sizeof(err)), MXOP_EINVAL);
    close(fd);
}
