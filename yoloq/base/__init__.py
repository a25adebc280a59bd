"""What every layer uses: user errors, the state folder, store settings, atomic writes, the offline guard, Prefect credentials and mail."""
