#include "core/dtype.h"

#include <string>

#include "core/error.h"

namespace weir {
namespace {

// Indexed by the GGUF type id; ids ggml retired stay empty.
constexpr DTypeTraits kNone{nullptr, 0, 0, false};
constexpr DTypeTraits kTraits[] = {
    /* 0 */ {"f32", 1, 4, true},
    /* 1 */ {"f16", 1, 2, true},
    /* 2 */ {"q4_0", 32, 18, true},
    /* 3 */ {"q4_1", 32, 20, true},
    /* 4 */ kNone,
    /* 5 */ kNone,
    /* 6 */ {"q5_0", 32, 22, true},
    /* 7 */ {"q5_1", 32, 24, true},
    /* 8 */ {"q8_0", 32, 34, true},
    /* 9 */ {"q8_1", 32, 36, false},
    /* 10 */ {"q2_K", 256, 84, true},
    /* 11 */ {"q3_K", 256, 110, true},
    /* 12 */ {"q4_K", 256, 144, true},
    /* 13 */ {"q5_K", 256, 176, true},
    /* 14 */ {"q6_K", 256, 210, true},
    /* 15 */ {"q8_K", 256, 292, true},
    /* 16 */ {"iq2_xxs", 256, 66, false},
    /* 17 */ {"iq2_xs", 256, 74, false},
    /* 18 */ {"iq3_xxs", 256, 98, false},
    /* 19 */ {"iq1_s", 256, 50, false},
    /* 20 */ {"iq4_nl", 32, 18, true},
    /* 21 */ {"iq3_s", 256, 110, false},
    /* 22 */ {"iq2_s", 256, 82, false},
    /* 23 */ {"iq4_xs", 256, 136, true},
    /* 24 */ {"i8", 1, 1, false},
    /* 25 */ {"i16", 1, 2, false},
    /* 26 */ {"i32", 1, 4, false},
    /* 27 */ {"i64", 1, 8, false},
    /* 28 */ {"f64", 1, 8, false},
    /* 29 */ {"iq1_m", 256, 56, false},
    /* 30 */ {"bf16", 1, 2, true},
    /* 31 */ kNone,  // 31-33: q4_0_4_4, q4_0_4_8, q4_0_8_8 (retired)
    /* 32 */ kNone,
    /* 33 */ kNone,
    /* 34 */ kNone,  // tq1_0, tq2_0: not read by weir
    /* 35 */ kNone,
    /* 36 */ kNone,  // 36-38: iq4_nl_4_4, iq4_nl_4_8, iq4_nl_8_8 (retired)
    /* 37 */ kNone,
    /* 38 */ kNone,
    /* 39 */ {"mxfp4", 32, 17, true},
};

}  // namespace

const DTypeTraits* dtype_traits(uint32_t raw) {
  if (raw >= sizeof(kTraits) / sizeof(kTraits[0])) return nullptr;
  const DTypeTraits* t = &kTraits[raw];
  return t->name ? t : nullptr;
}

const DTypeTraits& traits(DType t) {
  const DTypeTraits* p = dtype_traits(uint32_t(t));
  if (!p) throw Error("unknown dtype id " + std::to_string(uint32_t(t)));
  return *p;
}

size_t row_bytes(DType t, int64_t n) {
  const DTypeTraits& tr = traits(t);
  return size_t(n / tr.block_size) * tr.type_size;
}

}  // namespace weir
