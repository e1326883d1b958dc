package checkpoint

import (
	"encoding/json"
	"math"
	"strings"

	"github.com/kevgo/kev/internal/quote"
)

// AdapterConfig is the part of a PEFT adapter_config.json that the merge
// needs.
type AdapterConfig struct {
	R         int     // rank
	LoRAAlpha float64 // lora_alpha
	UseRSLoRA bool    // scale by alpha/√r instead of alpha/r
	// TargetModules lists the adapted module names; nil when the config
	// gives a regular expression (TargetRegex) instead.
	TargetModules []string
	TargetRegex   string
	PeftType      string
	TaskType      string
	BaseModel     string // base_model_name_or_path
}

// Scaling is the LoRA scale s: lora_alpha/r, or lora_alpha/√r with rsLoRA.
func (a *AdapterConfig) Scaling() float64 {
	if a.UseRSLoRA {
		return a.LoRAAlpha / math.Sqrt(float64(a.R))
	}
	return a.LoRAAlpha / float64(a.R)
}

// ReadAdapterConfig reads and validates adapter_config.json. Adapters this
// loader cannot merge exactly are refused with a *ConfigError naming the
// field: trainable_token_indices, DoRA, fan_in_fan_out, biases, rank or
// alpha patterns, modules_to_save.
func ReadAdapterConfig(path string) (*AdapterConfig, error) {
	b, err := readSmall(path, maxConfigBytes)
	if err != nil {
		return nil, err
	}
	return ParseAdapterConfig(path, b)
}

// ParseAdapterConfig is ReadAdapterConfig on bytes; file names them in
// errors.
func ParseAdapterConfig(file string, data []byte) (*AdapterConfig, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &ConfigError{File: file, Reason: "bad JSON: " + quote.Error(err)}
	}
	o := jsonObj{file: file, m: m}
	a := &AdapterConfig{}
	var err error
	if a.PeftType, _, err = o.str("peft_type"); err != nil {
		return nil, err
	}
	if a.PeftType != "" && a.PeftType != "LORA" {
		return nil, o.err("peft_type", "%s is not \"LORA\"", quote.String(a.PeftType))
	}
	if a.TaskType, _, err = o.str("task_type"); err != nil {
		return nil, err
	}
	if a.BaseModel, _, err = o.str("base_model_name_or_path"); err != nil {
		return nil, err
	}
	r, ok, err := o.num("r")
	if err != nil {
		return nil, err
	}
	if !ok || r != math.Trunc(r) || r < 1 || r > 1<<20 {
		return nil, o.err("r", "missing or not a positive integer")
	}
	a.R = int(r)
	alpha, ok, err := o.num("lora_alpha")
	if err != nil {
		return nil, err
	}
	if !ok || !(alpha > 0) || math.IsInf(alpha, 0) {
		return nil, o.err("lora_alpha", "missing or not a positive number")
	}
	a.LoRAAlpha = alpha
	if a.UseRSLoRA, _, err = o.boolean("use_rslora"); err != nil {
		return nil, err
	}
	if o.has("target_modules") {
		raw := o.m["target_modules"]
		if err := json.Unmarshal(raw, &a.TargetModules); err != nil {
			if err := json.Unmarshal(raw, &a.TargetRegex); err != nil {
				return nil, o.err("target_modules", "neither a list of names nor a pattern")
			}
		}
	}
	refuse := func(name, why string) error {
		return o.err(name, "is set; %s, so the adapter cannot be merged", why)
	}
	if o.has("trainable_token_indices") && !emptyJSON(o.m["trainable_token_indices"]) {
		return nil, refuse("trainable_token_indices", "it trains embedding rows that stay unmerged in Kev")
	}
	if v, _, err := o.boolean("use_dora"); err != nil {
		return nil, err
	} else if v {
		return nil, refuse("use_dora", "DoRA rescales weights by their norm")
	}
	if v, _, err := o.boolean("fan_in_fan_out"); err != nil {
		return nil, err
	} else if v {
		return nil, refuse("fan_in_fan_out", "weights would be transposed")
	}
	if v, ok, err := o.str("bias"); err != nil {
		return nil, err
	} else if ok && v != "none" {
		return nil, o.err("bias", "%s: LoRA biases are not supported (want \"none\")", quote.String(v))
	}
	for _, name := range []string{"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform"} {
		if o.has(name) && !emptyJSON(o.m[name]) {
			return nil, refuse(name, "per-module variations are not supported")
		}
	}
	return a, nil
}

// emptyJSON reports whether raw is null, {}, [] or "".
func emptyJSON(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "null" || s == "{}" || s == "[]" || s == `""`
}

// loraModules are the module names Kev adapts.
var loraModules = map[string]bool{
	"q_proj": true, "k_proj": true, "v_proj": true, "o_proj": true,
	"gate_proj": true, "up_proj": true, "down_proj": true,
	"in_proj_qkv": true, "in_proj_z": true, "in_proj_a": true, "in_proj_b": true, "out_proj": true,
}

// adapterTarget maps an adapter tensor name to the canonical base weight it
// adapts and which factor it is ("A" or "B"). ok is false for names that are
// not LoRA factors of a known module.
func adapterTarget(name string) (target, factor, module string, ok bool) {
	rest, found := strings.CutPrefix(name, "base_model.model.")
	if !found {
		return "", "", "", false
	}
	for _, p := range []string{"model.language_model.", "language_model.model.", "language_model.", "model."} {
		if r, cut := strings.CutPrefix(rest, p); cut {
			rest = r
			break
		}
	}
	switch {
	case strings.HasSuffix(rest, ".lora_A.weight"):
		factor, rest = "A", strings.TrimSuffix(rest, ".lora_A.weight")
	case strings.HasSuffix(rest, ".lora_B.weight"):
		factor, rest = "B", strings.TrimSuffix(rest, ".lora_B.weight")
	default:
		return "", "", "", false
	}
	module = rest[strings.LastIndexByte(rest, '.')+1:]
	if !loraModules[module] || !strings.HasPrefix(rest, "layers.") {
		return "", "", "", false
	}
	return rest + ".weight", factor, module, true
}

func (a *AdapterConfig) targets(module string) bool {
	if a.TargetModules == nil {
		return true // a pattern, or absent: the tensors decide
	}
	for _, t := range a.TargetModules {
		if t == module || strings.HasSuffix(module, "."+t) {
			return true
		}
	}
	return false
}
