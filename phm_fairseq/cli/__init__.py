"""The plugin's console commands (phm-params, phm-evaluate, phm-compress, phm-export)."""
