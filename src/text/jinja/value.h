// A template value: what Python's jinja2 handles (None, bool, int, float,
// str, list, tuple, dict, ...) and how Python prints, compares and iterates
// them, so that rendering gives the bytes jinja2 gives.
//
// Lists and dicts are shared and never change once made (as in Hugging
// Face's ImmutableSandboxedEnvironment, where templates cannot mutate them);
// a namespace() is the one mutable object and is shared by reference.
// Values nest at most kMaxNesting deep, and a namespace holds no namespace,
// loop or bound method of something holding one: so no value contains
// itself, and printing, comparing or freeing one recurses at most so deep.
// Strings longer than a few bytes are shared too, so that copying a value
// never copies its text: what a render costs is what it builds (work.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace weir::jinja {

// An error evaluating a template: a type error, an undefined value used,
// raise_exception(). The renderer adds the template's name and the
// line:column of the expression, and throws it on as weir::Error.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value;
struct Sequence;
class Dict;
struct Object;
struct Function;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Sequence, Dict, Object, Function };

// What a Sequence stands for in Python: they print differently and allow
// different things (a generator cannot be indexed, has no len() and is
// always true; dict views cannot be indexed; only lists and tuples can be
// written as JSON).
enum class SeqKind : uint8_t { List, Tuple, Range, DictKeys, DictValues, DictItems, Generator };

class Value {
 public:
  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::Bool), data_(b) {}
  Value(int64_t i) : kind_(Kind::Int), data_(i) {}
  Value(int i) : kind_(Kind::Int), data_(int64_t{i}) {}
  Value(double f) : kind_(Kind::Float), data_(f) {}
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}

  // An undefined value; `hint` is the error raised when it is used in a way
  // jinja2's Undefined refuses ("'x' is undefined").
  static Value undefined(std::string hint);
  static Value none();
  // A markupsafe.Markup string (what tojson, safe and escape give): adding a
  // plain string to it escapes that string, as in jinja2.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items, SeqKind kind = SeqKind::List);
  static Value tuple(std::vector<Value> items) { return list(std::move(items), SeqKind::Tuple); }
  static Value range(int64_t start, int64_t stop, int64_t step);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);
  static Value function(std::shared_ptr<const Function> f);
  // A builtin function or bound method: `name` is for errors.
  static Value function(std::string name, std::function<Value(const struct CallArgs&)> call);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_sequence() const { return kind_ == Kind::Sequence; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_function() const { return kind_ == Kind::Function; }
  bool is_seq(SeqKind k) const;  // a sequence of kind k

  bool boolean() const { return std::get<bool>(data_); }
  // Int, or Bool as 0/1.
  int64_t integer() const;
  // Int, Float or Bool as a double.
  double number() const;
  const std::string& text() const {  // String
    if (const auto* s = std::get_if<std::string>(&data_)) return *s;
    return *std::get<SharedText>(data_);
  }
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }
  const Sequence& seq() const { return *std::get<std::shared_ptr<const Sequence>>(data_); }
  SeqKind seq_kind() const;
  const Dict& dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  const Function& function() const { return *std::get<std::shared_ptr<const Function>>(data_); }
  // The shared object behind a list, dict, namespace or function (Python's
  // identity for `is sameas`); null for the others.
  const void* identity() const;

  bool truthy() const;       // Python's bool()
  std::string str() const;   // Python's str(); undefined prints as ""
  std::string repr() const;  // Python's repr()
  const char* type_name() const;  // Python's type name, for errors

 private:
  using SharedText = std::shared_ptr<const std::string>;
  // Strings up to this long are kept in the value (std::string's own
  // buffer holds them without allocating), longer ones shared.
  static constexpr size_t kInlineText = 15;

  Kind kind_ = Kind::Undefined;
  bool markup_ = false;
  // A String is a std::string (short) or SharedText (long); an undefined
  // value's hint is a std::string.
  std::variant<std::monostate, bool, int64_t, double, std::string, SharedText, std::shared_ptr<const Sequence>,
               std::shared_ptr<const Dict>, std::shared_ptr<Object>, std::shared_ptr<const Function>>
      data_;
};

// Lists and dicts nested deeper than this are refused (jinja2 itself fails
// near Python's recursion limit of 1000 when printing them).
inline constexpr uint32_t kMaxNesting = 1000;

struct Sequence {
  SeqKind kind = SeqKind::List;
  std::vector<Value> items;
  uint32_t depth = 1;            // 1 + the deepest item's nesting (value_depth)
  bool holds_reference = false;  // an item is or holds a namespace or loop (holds_reference())
  int64_t start = 0, stop = 0, step = 1;  // Range: printed as range(start, stop[, step])
  // Generator: how many items were already taken (a generator is consumed
  // once, as in Python).
  mutable size_t consumed = 0;
};

// Insertion-ordered, keys compared as Python compares them (1 == 1.0 == True).
// Past kIndexFrom keys a hash index finds them, so that a dict built from a
// big JSON object (a client's message) or by a filter (unique) is not
// quadratic to build.
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing key, else appends. Throws EvalError
  // for keys Python cannot hash (list, dict).
  void set(Value key, Value value);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  uint32_t depth() const { return depth_; }  // 1 + the deepest key's or value's nesting
  bool holds_reference() const { return holds_reference_; }  // a key or value is or holds a namespace or loop
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  static constexpr size_t kIndexFrom = 16;
  // The position of key's entry in items_, or -1.
  std::ptrdiff_t position(const Value& key, std::string_view text_key, bool by_text) const;

  std::vector<std::pair<Value, Value>> items_;
  std::unordered_multimap<uint64_t, size_t> index_;  // key_hash of a key -> its position; empty below kIndexFrom
  uint32_t depth_ = 1;  // never lowered when a value is replaced: at least the true depth
  bool holds_reference_ = false;
};

// A namespace() (attributes set with `set ns.x = ...`) or a for loop's `loop`.
struct Object {
  std::string class_name;  // "Namespace", "LoopContext"
  Dict attrs;
  std::string fixed_repr;  // printed as this when not empty (loop)
  bool assignable = false;  // namespace: `set obj.attr = v` allowed
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Function {
  std::string name;
  std::vector<std::string> params;  // a macro's parameter names (its `arguments`)
  std::function<Value(const CallArgs&)> call;
  bool is_macro = false;  // prints as <Macro 'name'>; other functions cannot be printed
  // What `call` holds of the template's values: a bound method its object
  // (a macro holds its scope weakly, a builtin nothing). As Sequence's.
  uint32_t depth = 0;
  bool holds_reference = false;
};

bool equals(const Value& a, const Value& b);  // Python's ==
// Python's ordering: -1, 0 or 1 as a < b, a == b, a > b, and 2 when a NaN
// makes them unordered. Throws EvalError where Python's `op` raises
// TypeError (an int and a str, None, dicts).
int compare(const Value& a, const Value& b, const char* op = "<");
// The items Python's iter() gives: nothing for undefined, characters of a
// string, keys of a dict; a generator's remaining items (consuming them).
// Throws EvalError for what is not iterable.
std::vector<Value> iterate(const Value& v);
// Python's len(); throws EvalError where len() raises TypeError.
int64_t length(const Value& v);
// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);

// Whether Python can hash v (a dict key, a set member); lists, dicts and
// namespaces it cannot.
bool hashable(const Value& v);
// A hash of a hashable value that agrees with equals(): 1, 1.0 and True
// hash alike, a Markup string as its text.
uint64_t key_hash(const Value& v);

// How deep v nests: 0 for a number or string, 1 for a list of them, ...
uint32_t value_depth(const Value& v);
// Whether v is or holds (in a list or dict) a namespace, a loop, or a bound
// method of something that holds one: what a namespace may not hold.
bool holds_reference(const Value& v);

// Python's repr() of a float (shortest round trip: 0.1, 1e+16, 1.0).
std::string float_repr(double f);
// Python's repr() of a string.
std::string string_repr(std::string_view s);
// markupsafe.escape: & < > ' " as HTML entities.
std::string html_escape(std::string_view s);

}  // namespace weir::jinja
