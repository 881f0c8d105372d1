/*
 * server/worker/states.c - the live instances of stateful ops.
 *
 * A state id is (generation << 32) | counter, so that an id handed out by
 * a worker that has since crashed is recognised (MXOP_ESTATE_LOST) rather
 * than confused with a live one.  Ids live in an open-addressed table,
 * like regions, so an Invoke finds its state without scanning.
 */
#include <stdlib.h>

#include "common/util.h"
#include "server/worker/worker.h"

typedef struct state_slot {
    uint64_t id; /* 0: free */
    uint32_t op;
    void *state;
} state_slot_t;

static state_slot_t *slots;
static uint32_t cap; /* a power of two, or 0 */
static uint32_t count;
static uint32_t generation;
static uint32_t counter;
static uint32_t max_states = 4096; /* the session's quota (--max-states) */

void mxop__states_init(uint32_t gen)
{
    generation = gen;
}

static inline uint32_t hash(uint64_t id, uint32_t tcap)
{
    return ((uint32_t)id * 2654435761u) & (tcap - 1);
}

static state_slot_t *find(uint64_t id)
{
    if (cap == 0 || id == 0)
        return NULL;
    for (uint32_t i = hash(id, cap);; i = (i + 1) & (cap - 1)) {
        if (slots[i].id == id)
            return &slots[i];
        if (slots[i].id == 0)
            return NULL;
    }
}

static void insert(state_slot_t *tab, uint32_t tcap, const state_slot_t *s)
{
    uint32_t i = hash(s->id, tcap);
    while (tab[i].id != 0)
        i = (i + 1) & (tcap - 1);
    tab[i] = *s;
}

static int grow(void)
{
    if (cap != 0 && (count + 1) * 2 <= cap)
        return 0;
    uint32_t ncap = cap ? cap * 2 : 16;
    if (ncap == 0)
        return MXOP_ENOMEM;
    state_slot_t *tab = calloc(ncap, sizeof(*tab));
    if (tab == NULL)
        return MXOP_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        if (slots[i].id != 0)
            insert(tab, ncap, &slots[i]);
    free(slots);
    slots = tab;
    cap = ncap;
    return 0;
}

void mxop__states_set_max(uint32_t n)
{
    max_states = n;
}

int mxop__states_room(char *msg, size_t msglen)
{
    if (count < max_states)
        return 0;
    mxop__fmt(msg, msglen,
              "the session holds %u op states, its limit (mxop-serverd --session-max-states %u); "
              "destroy states it no longer needs first",
              (unsigned)count, (unsigned)max_states);
    return MXOP_ELIMIT;
}

int mxop__state_add(uint32_t op, void *state, uint64_t *id)
{
    if (counter == UINT32_MAX)
        return MXOP_ELIMIT;
    int rc = grow();
    if (rc != 0)
        return rc;
    state_slot_t s = {((uint64_t)generation << 32) | ++counter, op, state};
    insert(slots, cap, &s);
    count++;
    *id = s.id;
    return 0;
}

int mxop__state_find(uint64_t id, uint32_t *op, void **state, char *msg, size_t msglen)
{
    state_slot_t *s = find(id);
    if (s != NULL) {
        *op = s->op;
        *state = s->state;
        return 0;
    }
    uint32_t gen = (uint32_t)(id >> 32);
    if (gen != 0 && gen < generation && (uint32_t)id != 0) {
        mxop__fmt(msg, msglen, "state %llu was lost when its worker crashed; create it again",
                  (unsigned long long)id);
        return MXOP_ESTATE_LOST;
    }
    mxop__fmt(msg, msglen, "no state %llu in this session", (unsigned long long)id);
    return MXOP_EUNKNOWN_STATE;
}

void mxop__state_remove(uint64_t id)
{
    state_slot_t *s = find(id);
    if (s == NULL)
        return;
    uint32_t hole = (uint32_t)(s - slots);
    slots[hole].id = 0;
    for (uint32_t j = (hole + 1) & (cap - 1); slots[j].id != 0; j = (j + 1) & (cap - 1)) {
        uint32_t home = hash(slots[j].id, cap);
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            slots[hole] = slots[j];
            slots[j].id = 0;
            hole = j;
        }
    }
    count--;
}

void mxop__states_destroy_all(void)
{
    for (uint32_t i = 0; i < cap; i++) {
        if (slots[i].id == 0)
            continue;
        const mxop__worker_op_t *op = mxop__op_get(slots[i].op);
        /* A state_destroy that crashes is named in the status page like any call. */
        if (op != NULL && op->def.state_destroy != NULL) {
            mxop__status_begin(0, op->name, 0);
            mxop__status_callback("state_destroy");
            op->def.state_destroy(slots[i].state);
            mxop__status_end();
        }
        slots[i].id = 0;
    }
    count = 0;
    free(slots);
    slots = NULL;
    cap = 0;
}
