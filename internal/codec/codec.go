// Package codec is how Drover's payloads travel through Temporal: JSON,
// as the SDK's default converter writes it, with every payload of
// Threshold bytes or more compressed with zlib.
//
// A workflow's input carries its plan, and a plan of thousands of volume
// groups is hundreds of KiB of JSON (about 470 KiB at 5,000 groups),
// close to the size at which the Temporal server starts warning (512 KiB)
// and a fifth of the size it refuses (2 MiB). Plan JSON compresses more
// than tenfold. Small payloads, nearly all of them, stay plain JSON, so
// the Temporal UI and CLI show them as they are; a compressed one shows
// as binary/zlib.
//
// Every client that reads Drover's payloads must use Converter: the
// worker, drctl, and the tools and tests that read results. Decoding
// passes plain payloads through, so histories written before compression
// read as before, and a client that only writes may do without it.
package codec

import (
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// Threshold is the encoded size from which a payload is compressed.
const Threshold = 64 << 10

// Converter is the SDK's default JSON converter with large payloads
// compressed.
func Converter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), Codec())
}

// Codec compresses payloads of Threshold bytes or more (when that makes
// them smaller) and decompresses any zlib payload.
func Codec() converter.PayloadCodec {
	return large{zlib: converter.NewZlibCodec(converter.ZlibCodecOptions{})}
}

type large struct{ zlib converter.PayloadCodec }

func (c large) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		out[i] = p
		if proto.Size(p) < Threshold {
			continue
		}
		enc, err := c.zlib.Encode([]*commonpb.Payload{p})
		if err != nil {
			return payloads, err
		}
		out[i] = enc[0]
	}
	return out, nil
}

func (c large) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	return c.zlib.Decode(payloads)
}
