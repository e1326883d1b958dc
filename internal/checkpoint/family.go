package checkpoint

// familyModelTypes maps the model_type of later releases of the Qwen3.5 architecture to the Qwen3.5 name they
// share every tensor and every computation with. Qwen3.8 (the 27B base of Kev-27B v2: 64 layers, 48 Gated DeltaNet
// and 16 gated attention, hidden 5120, multimodal wrapper) calls itself "qwen3_8" and its text model
// "qwen3_8_text"; its dimensions and weights' names are those of the Qwen3.5 family.
var familyModelTypes = map[string]string{
	"qwen3_8":      "qwen3_5",
	"qwen3_8_text": "qwen3_5_text",
}

// familyModelType returns the Qwen3.5 model_type that mt is a later name of, or mt itself.
func familyModelType(mt string) string {
	if f, ok := familyModelTypes[mt]; ok {
		return f
	}
	return mt
}
