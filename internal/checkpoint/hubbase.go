package checkpoint

import (
	"fmt"

	"github.com/kevgo/kev/internal/hub"
)

// HubBase returns the base model of a checkpoint that came from the Hub, as
// the Hub name to fetch ("org/name" or "org/name@<base_revision>"). A
// checkpoint from the Hub may not name a local directory as its base: a base
// that is not a Hub name (an absolute or relative path, a home directory, a
// drive letter) or a base_revision that is not a revision is refused with a
// *ConfigError on the field. Fetch the name with hub.Options.HubOnly, so that
// a local directory of the same name is not used either. headPath names
// head.pt in errors.
func (h *Head) HubBase(headPath string) (string, error) {
	if h.Base == "" {
		return "", &ConfigError{File: headPath, Field: "base", Reason: "missing: a checkpoint from the hub must name its base model on the hub"}
	}
	name := h.Base
	if h.BaseRevision != "" {
		name += "@" + h.BaseRevision
	}
	if _, err := hub.ParseName(name); err != nil {
		field := "base"
		if ne, ok := err.(*hub.NameError); ok && ne.Field == "revision" {
			field = "base_revision"
		}
		return "", &ConfigError{File: headPath, Field: field,
			Reason: fmt.Sprintf("is not a hub name, and a checkpoint from the hub must name its base model on the hub (%v)", err)}
	}
	return name, nil
}
