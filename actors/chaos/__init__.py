"""Built-in named chaos actors (registered through the ``chaosflow.chaos_actors`` entry points)."""
