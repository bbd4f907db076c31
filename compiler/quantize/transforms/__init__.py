"""Float graph transforms of the quantiser (bias absorption, equalisation, SmoothQuant,
AdaRound) and the realisation pass that writes the QDQ form."""
