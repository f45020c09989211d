// The engine demo and benchmark arrive with the engine.
