// The completions' suffix as a fill-in-the-middle prompt: [BOS] <fim_pre>
// prefix <fim_suf> suffix <fim_mid>, the order of llama.cpp's /infill
// (PSM), written out here by hand; a vocabulary without the three tokens is
// a 400 naming suffix.
#include "engine/openai/fill_in_middle.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "engine/openai/request.h"

namespace weir::openai {
namespace {

Vocab vocab(bool with_fim, bool add_bos) {
  const std::vector<std::string_view> toks = {"<unk>", "<s>", "</s>", "<PRE_>", "<SUF_>", "<MID_>", "a", "b"};
  Vocab::Config cfg;
  cfg.add_bos = add_bos;
  if (with_fim) {
    cfg.fim_pre = 3;
    cfg.fim_suf = 4;
    cfg.fim_mid = 5;
  }
  return Vocab::from_arrays(toks, {}, {}, cfg);
}

TEST(FillInMiddle, PrefixSuffixMiddle) {
  const std::vector<int32_t> prefix = {6, 6}, suffix = {7};
  EXPECT_EQ(fill_in_middle_prompt(vocab(true, true), prefix, suffix), (std::vector<int32_t>{1, 3, 6, 6, 4, 7, 5}));
  EXPECT_EQ(fill_in_middle_prompt(vocab(true, false), prefix, suffix), (std::vector<int32_t>{3, 6, 6, 4, 7, 5}));
  EXPECT_EQ(fill_in_middle_prompt(vocab(true, false), {}, {}), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_NO_THROW(require_fill_in_middle(vocab(true, true)));
}

TEST(FillInMiddle, RefusedWithoutTheTokens) {
  try {
    fill_in_middle_prompt(vocab(false, true), std::vector<int32_t>{6}, std::vector<int32_t>{7});
    FAIL() << "taken";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "suffix");
    EXPECT_NE(std::string(e.what()).find("fill-in-the-middle"), std::string::npos) << e.what();
  }
  EXPECT_THROW(require_fill_in_middle(vocab(false, false)), ApiError);
}

}  // namespace
}  // namespace weir::openai
