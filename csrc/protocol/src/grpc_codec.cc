#include "pyserver/protocol/grpc_codec.h"

#include <cstring>

namespace pyserver {
namespace grpc {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLen = 2;
constexpr uint32_t kFixed32 = 5;

// Bytes that are no ModelInferRequest are the client's mistake (gRPC servers
// commonly say INTERNAL; a client should not see a server fault for it).
Status Malformed(const char* what) {
  return Status(StatusCode::kInvalidArg,
                std::string("failed to parse the ModelInferRequest message: ") + what);
}

// A bounds-checked cursor over protobuf wire bytes.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

  bool done() const { return p_ >= end_; }

  bool Varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return false;
      uint8_t b = *p_++;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }

  // Next field's number and wire type; false at a malformed tag.
  bool Tag(uint32_t* field, uint32_t* wire) {
    uint64_t tag;
    if (!Varint(&tag) || tag > 0xffffffffu) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire = static_cast<uint32_t>(tag & 7);
    return *field != 0;
  }

  bool Bytes(std::string_view* out) {
    uint64_t n;
    if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p_), static_cast<size_t>(n));
    p_ += n;
    return true;
  }

  bool Fixed64(uint64_t* v) {
    if (end_ - p_ < 8) return false;
    std::memcpy(v, p_, 8);  // little-endian host (x86-64, aarch64)
    p_ += 8;
    return true;
  }

  bool Skip(uint32_t wire) {
    uint64_t v;
    std::string_view s;
    switch (wire) {
      case kVarint: return Varint(&v);
      case kFixed64: return Fixed64(&v);
      case kLen: return Bytes(&s);
      case kFixed32:
        if (end_ - p_ < 4) return false;
        p_ += 4;
        return true;
      default: return false;  // groups (3, 4) and invalid types
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

Reader Sub(std::string_view s) {
  return Reader(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// InferParameter: oneof {bool 1, int64 2, string 3, double 4, uint64 5}.
bool ParseParameterValue(std::string_view bytes, Parameter* p) {
  Reader r = Sub(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.Tag(&field, &wire)) return false;
    uint64_t v;
    if (field == 1 && wire == kVarint) {
      if (!r.Varint(&v)) return false;
      p->kind = Parameter::Kind::kBool;
      p->bool_value = v != 0;
    } else if (field == 2 && wire == kVarint) {
      if (!r.Varint(&v)) return false;
      p->kind = Parameter::Kind::kInt64;
      p->int64_value = static_cast<int64_t>(v);
    } else if (field == 3 && wire == kLen) {
      if (!r.Bytes(&p->string_value)) return false;
      p->kind = Parameter::Kind::kString;
    } else if (field == 4 && wire == kFixed64) {
      if (!r.Fixed64(&v)) return false;
      p->kind = Parameter::Kind::kDouble;
      std::memcpy(&p->double_value, &v, 8);
    } else if (field == 5 && wire == kVarint) {
      if (!r.Varint(&v)) return false;
      p->kind = Parameter::Kind::kUint64;
      p->uint64_value = v;
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  return true;
}

// One map<string, InferParameter> entry: {key 1, value 2}.
bool ParseParameterEntry(std::string_view bytes, std::vector<Parameter>* out) {
  Parameter p;
  Reader r = Sub(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.Tag(&field, &wire)) return false;
    std::string_view s;
    if (field == 1 && wire == kLen) {
      if (!r.Bytes(&p.key)) return false;
    } else if (field == 2 && wire == kLen) {
      // A repeated value field merges: the last member set wins.
      if (!r.Bytes(&s) || !ParseParameterValue(s, &p)) return false;
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  // A later entry with the same key replaces an earlier one.
  for (auto& existing : *out) {
    if (existing.key == p.key) {
      existing = p;
      return true;
    }
  }
  out->push_back(p);
  return true;
}

bool ParseShape(Reader* r, uint32_t wire, std::vector<int64_t>* shape) {
  uint64_t v;
  if (wire == kVarint) {
    if (!r->Varint(&v)) return false;
    shape->push_back(static_cast<int64_t>(v));
    return true;
  }
  std::string_view packed;
  if (!r->Bytes(&packed)) return false;
  Reader p = Sub(packed);
  while (!p.done()) {
    if (!p.Varint(&v)) return false;
    shape->push_back(static_cast<int64_t>(v));
  }
  return true;
}

bool ParseInput(std::string_view bytes, InputTensorView* in) {
  Reader r = Sub(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.Tag(&field, &wire)) return false;
    std::string_view s;
    if (field == 1 && wire == kLen) {
      if (!r.Bytes(&in->name)) return false;
    } else if (field == 2 && wire == kLen) {
      if (!r.Bytes(&in->datatype)) return false;
    } else if (field == 3 && (wire == kLen || wire == kVarint)) {
      if (!ParseShape(&r, wire, &in->shape)) return false;
    } else if (field == 4 && wire == kLen) {
      if (!r.Bytes(&s) || !ParseParameterEntry(s, &in->parameters)) return false;
    } else if (field == 5 && wire == kLen) {
      if (!r.Bytes(&s)) return false;
      in->has_contents = true;
      in->contents.append(s.data(), s.size());
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  return true;
}

bool ParseOutput(std::string_view bytes, RequestedOutputView* out) {
  Reader r = Sub(bytes);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.Tag(&field, &wire)) return false;
    std::string_view s;
    if (field == 1 && wire == kLen) {
      if (!r.Bytes(&out->name)) return false;
    } else if (field == 2 && wire == kLen) {
      if (!r.Bytes(&s) || !ParseParameterEntry(s, &out->parameters)) return false;
    } else if (!r.Skip(wire)) {
      return false;
    }
  }
  return true;
}

// ---- writing ---------------------------------------------------------------

size_t TagSize(uint32_t field) { return VarintSize(static_cast<uint64_t>(field) << 3); }

size_t LenFieldSize(uint32_t field, size_t n) { return TagSize(field) + VarintSize(n) + n; }

size_t StringFieldSize(uint32_t field, std::string_view s) {
  return s.empty() ? 0 : LenFieldSize(field, s.size());
}

uint8_t* PutVarint(uint64_t v, uint8_t* out) {
  while (v >= 0x80) {
    *out++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<uint8_t>(v);
  return out;
}

uint8_t* PutTag(uint32_t field, uint32_t wire, uint8_t* out) {
  return PutVarint((static_cast<uint64_t>(field) << 3) | wire, out);
}

uint8_t* PutLenField(uint32_t field, const void* data, size_t n, uint8_t* out) {
  out = PutTag(field, kLen, out);
  out = PutVarint(n, out);
  if (n != 0) std::memcpy(out, data, n);
  return out + n;
}

uint8_t* PutStringField(uint32_t field, std::string_view s, uint8_t* out) {
  return s.empty() ? out : PutLenField(field, s.data(), s.size(), out);
}

size_t ParameterValueSize(const Parameter& p) {
  switch (p.kind) {
    case Parameter::Kind::kBool: return 1 + 1;
    case Parameter::Kind::kInt64: return 1 + VarintSize(static_cast<uint64_t>(p.int64_value));
    case Parameter::Kind::kString: return LenFieldSize(3, p.string_value.size());
    case Parameter::Kind::kDouble: return 1 + 8;
    case Parameter::Kind::kUint64: return 1 + VarintSize(p.uint64_value);
    case Parameter::Kind::kNone: return 0;
  }
  return 0;
}

size_t ParameterEntrySize(const Parameter& p) {
  return StringFieldSize(1, p.key) + LenFieldSize(2, ParameterValueSize(p));
}

size_t ParametersSize(uint32_t field, const std::vector<Parameter>& params) {
  size_t n = 0;
  for (const auto& p : params) n += LenFieldSize(field, ParameterEntrySize(p));
  return n;
}

uint8_t* PutParameters(uint32_t field, const std::vector<Parameter>& params, uint8_t* out) {
  for (const auto& p : params) {
    out = PutTag(field, kLen, out);
    out = PutVarint(ParameterEntrySize(p), out);
    out = PutStringField(1, p.key, out);
    out = PutTag(2, kLen, out);
    out = PutVarint(ParameterValueSize(p), out);
    switch (p.kind) {
      case Parameter::Kind::kBool:
        out = PutTag(1, kVarint, out);
        *out++ = p.bool_value ? 1 : 0;
        break;
      case Parameter::Kind::kInt64:
        out = PutTag(2, kVarint, out);
        out = PutVarint(static_cast<uint64_t>(p.int64_value), out);
        break;
      case Parameter::Kind::kString:
        out = PutLenField(3, p.string_value.data(), p.string_value.size(), out);
        break;
      case Parameter::Kind::kDouble:
        out = PutTag(4, kFixed64, out);
        std::memcpy(out, &p.double_value, 8);
        out += 8;
        break;
      case Parameter::Kind::kUint64:
        out = PutTag(5, kVarint, out);
        out = PutVarint(p.uint64_value, out);
        break;
      case Parameter::Kind::kNone:
        break;
    }
  }
  return out;
}

size_t ShapePayloadSize(const std::vector<int64_t>& shape) {
  size_t n = 0;
  for (int64_t d : shape) n += VarintSize(static_cast<uint64_t>(d));
  return n;
}

size_t OutputTensorSize(const OutputTensorView& t) {
  size_t n = StringFieldSize(1, t.name) + StringFieldSize(2, t.datatype);
  if (!t.shape.empty()) n += LenFieldSize(3, ShapePayloadSize(t.shape));
  return n + ParametersSize(4, t.parameters);
}

}  // namespace

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void InferRequestView::Clear() {
  model_name = {};
  model_version = {};
  id = {};
  parameters.clear();
  inputs.clear();
  outputs.clear();
  raw_input_contents.clear();
}

Status ParseModelInferRequest(const uint8_t* data, size_t size, InferRequestView* out) {
  Reader r(data, size);
  while (!r.done()) {
    uint32_t field, wire;
    if (!r.Tag(&field, &wire)) return Malformed("invalid field tag");
    if (wire != kLen) {
      if (!r.Skip(wire)) return Malformed("truncated or invalid field");
      continue;
    }
    std::string_view s;
    if (!r.Bytes(&s)) return Malformed("field length exceeds the message");
    switch (field) {
      case 1: out->model_name = s; break;
      case 2: out->model_version = s; break;
      case 3: out->id = s; break;
      case 4:
        if (!ParseParameterEntry(s, &out->parameters)) return Malformed("invalid parameters");
        break;
      case 5:
        out->inputs.emplace_back();
        if (!ParseInput(s, &out->inputs.back())) return Malformed("invalid input tensor");
        break;
      case 6:
        out->outputs.emplace_back();
        if (!ParseOutput(s, &out->outputs.back())) return Malformed("invalid requested output");
        break;
      case 7: out->raw_input_contents.push_back(s); break;
      default: break;  // unknown field: skipped
    }
  }
  return Status::Ok();
}

size_t ModelInferResponseSize(const InferResponseView& r) {
  size_t n = StringFieldSize(1, r.model_name) + StringFieldSize(2, r.model_version) +
             StringFieldSize(3, r.id) + ParametersSize(4, r.parameters);
  for (const auto& t : r.outputs) {
    n += LenFieldSize(5, OutputTensorSize(t));
    n += LenFieldSize(6, t.raw_size);  // one raw entry per output, even empty
  }
  return n;
}

size_t WriteModelInferResponse(const InferResponseView& r, uint8_t* out) {
  uint8_t* start = out;
  out = PutStringField(1, r.model_name, out);
  out = PutStringField(2, r.model_version, out);
  out = PutStringField(3, r.id, out);
  out = PutParameters(4, r.parameters, out);
  for (const auto& t : r.outputs) {
    out = PutTag(5, kLen, out);
    out = PutVarint(OutputTensorSize(t), out);
    out = PutStringField(1, t.name, out);
    out = PutStringField(2, t.datatype, out);
    if (!t.shape.empty()) {
      out = PutTag(3, kLen, out);
      out = PutVarint(ShapePayloadSize(t.shape), out);
      for (int64_t d : t.shape) out = PutVarint(static_cast<uint64_t>(d), out);
    }
    out = PutParameters(4, t.parameters, out);
  }
  for (const auto& t : r.outputs) out = PutLenField(6, t.raw, t.raw_size, out);
  return static_cast<size_t>(out - start);
}

size_t StreamResponsePrefixSize(std::string_view error, size_t infer_size, bool has_infer) {
  size_t n = StringFieldSize(1, error);
  if (has_infer) n += TagSize(2) + VarintSize(infer_size);
  return n;
}

size_t WriteStreamResponsePrefix(std::string_view error, size_t infer_size, bool has_infer,
                                 uint8_t* out) {
  uint8_t* start = out;
  out = PutStringField(1, error, out);
  if (has_infer) {
    out = PutTag(2, kLen, out);
    out = PutVarint(infer_size, out);
  }
  return static_cast<size_t>(out - start);
}

int64_t ParseGrpcTimeoutUs(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return -1;
  int64_t amount = 0;
  for (size_t i = 0; i + 1 < value.size(); ++i) {
    char c = value[i];
    if (c < '0' || c > '9') return -1;
    amount = amount * 10 + (c - '0');
  }
  switch (value.back()) {
    case 'H': return amount * 3600 * 1000000;
    case 'M': return amount * 60 * 1000000;
    case 'S': return amount * 1000000;
    case 'm': return amount * 1000;
    case 'u': return amount;
    case 'n': return (amount + 999) / 1000;
    default: return -1;
  }
}

std::string PercentEncode(std::string_view message) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (char ch : message) {
    auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace grpc
}  // namespace pyserver
