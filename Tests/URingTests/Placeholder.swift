// Engine tests arrive with the engine.
