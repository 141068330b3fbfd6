// Unicode facts against the Unicode Character Database (values as
// UnicodeData.txt and PropList.txt give them).
#include "text/unicode_props.h"

#include <gtest/gtest.h>

namespace weir::unicode {
namespace {

TEST(UnicodeProps, Categories) {
  EXPECT_EQ(category('a'), Category::Letter);
  EXPECT_EQ(category(0x4E00), Category::Letter);       // CJK, inside a First/Last range
  EXPECT_EQ(category(0xD55C), Category::Letter);       // a Hangul syllable
  EXPECT_EQ(category(0x0301), Category::Mark);         // combining acute (Mn)
  EXPECT_EQ(category('7'), Category::Number);
  EXPECT_EQ(category(0x00BD), Category::Number);       // ½ (No)
  EXPECT_EQ(category('!'), Category::Punctuation);
  EXPECT_EQ(category(0x3001), Category::Punctuation);  // 、
  EXPECT_EQ(category('$'), Category::Symbol);
  EXPECT_EQ(category(0x20AC), Category::Symbol);       // €
  EXPECT_EQ(category(' '), Category::Separator);
  EXPECT_EQ(category(0x2029), Category::Separator);    // Zp
  EXPECT_EQ(category(0x0001), Category::Control);      // Cc
  EXPECT_EQ(category(0x200D), Category::Control);      // ZWJ (Cf)
  EXPECT_EQ(category(0xE000), Category::Control);      // private use (Co)
  EXPECT_EQ(category(0xD800), Category::Control);      // surrogate (Cs)
  EXPECT_EQ(category(0x0378), Category::Undefined);    // unassigned (Cn)
  EXPECT_EQ(category(0x10FFFF), Category::Undefined);  // a noncharacter (Cn)
  EXPECT_EQ(category(0x110000), Category::Undefined);
}

TEST(UnicodeProps, WhiteSpace) {
  for (char32_t c : {0x09, 0x0A, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x202F,
                     0x205F, 0x3000})
    EXPECT_TRUE(is_white_space(c)) << std::hex << uint32_t(c);
  for (char32_t c : {0x08, 0x1C, 0x1F, 0x180E, 0x200B, 0xFEFF, 0x61})
    EXPECT_FALSE(is_white_space(c)) << std::hex << uint32_t(c);
}

TEST(UnicodeProps, NfdFirstCodePoint) {
  EXPECT_EQ(nfd_first(0x00E9), U'e');      // é = e + U+0301
  EXPECT_EQ(nfd_first(0x00C5), U'A');      // Å
  EXPECT_EQ(nfd_first(0x212B), U'A');      // Ångström sign -> Å -> A
  EXPECT_EQ(nfd_first(0x1E69), U's');      // ṩ: two marks
  EXPECT_EQ(nfd_first(0xD55C), char32_t(0x1112));  // 한 -> ᄒ
  EXPECT_EQ(nfd_first(0xF900), char32_t(0x8C48));  // a CJK compatibility ideograph
  EXPECT_EQ(nfd_first(0xFB01), char32_t(0xFB01));  // ﬁ: compatibility only
  EXPECT_EQ(nfd_first(U'a'), U'a');
  EXPECT_EQ(nfd_first(0x110000), char32_t(0x110000));
}

TEST(UnicodeProps, SimpleLowerCase) {
  EXPECT_EQ(to_lower(U'A'), U'a');
  EXPECT_EQ(to_lower(U'z'), U'z');
  EXPECT_EQ(to_lower(0x00C9), char32_t(0x00E9));  // É
  EXPECT_EQ(to_lower(0x0130), U'i');              // İ
  EXPECT_EQ(to_lower(0x03A3), char32_t(0x03C3));  // Σ
  EXPECT_EQ(to_lower(0x0410), char32_t(0x0430));  // А
  EXPECT_EQ(to_lower(0x212A), U'k');              // Kelvin sign
  EXPECT_EQ(to_lower(0x10400), char32_t(0x10428));  // Deseret
  EXPECT_EQ(to_lower(0x00DF), char32_t(0x00DF));  // ß has no lower-case mapping of its own
}

}  // namespace
}  // namespace weir::unicode
